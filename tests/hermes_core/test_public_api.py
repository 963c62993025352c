import hermes_core


def test_public_api_is_exactly_what_library_users_rely_on() -> None:
    assert sorted(hermes_core.__all__) == [
        "ConfigurationError",
        "ErrorKind",
        "HermesError",
        "Message",
        "ModelRequest",
        "ModelResponse",
        "Provider",
        "ProviderConfig",
        "ProviderError",
        "ProviderEvent",
        "Usage",
        "create_provider",
    ]
