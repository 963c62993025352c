import hermes_core


def test_public_api_is_exactly_what_library_users_rely_on() -> None:
    assert sorted(hermes_core.__all__) == [
        "Agent",
        "AgentCallbacks",
        "AgentConfig",
        "AgentEvent",
        "AgentRequest",
        "BudgetPressure",
        "ConfigurationError",
        "ContextHooks",
        "ErrorKind",
        "ExitReason",
        "HermesError",
        "InvalidRequestError",
        "IterationBudget",
        "Message",
        "ModelRequest",
        "ModelResponse",
        "Provider",
        "ProviderConfig",
        "ProviderError",
        "ProviderEvent",
        "Tool",
        "ToolContext",
        "ToolRegistry",
        "Usage",
        "create_provider",
    ]
