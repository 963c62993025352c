"""A served config for budget tests: one key with a monthly budget, one simulated provider
whose output tokens cost 1 USD per thousand."""

from __future__ import annotations


def budgeted_config(simulator_url: str, upstream: str, key: str, budget_usd: float) -> str:
    return f"""
server:
  api_keys:
    - {{principal: team, key: {key}, budget: {{cost_per_month_usd: {budget_usd}}}}}
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator_url}/v1
    api_key: upstream-key
prices:
  {upstream}: {{input: 0, output: 1000}}
profiles:
  - {{id: hermes-agent, providers: [sim]}}
"""
