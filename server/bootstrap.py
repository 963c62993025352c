"""Build the running server from a loaded configuration: provider chains, agent profiles,
keys and limits, and the embedded simulator when no real upstream is configured."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from hermes_core.context import CachingContext, CompressingContext, Compressor, PromptCacheSettings
from hermes_core.pricing import Price, PriceTable
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.images_api import ImageChain, ImagesProvider
from hermes_core.skills.shelf import load_directory_skills
from hermes_core.tools.egress import EgressPolicy
from hermes_core.tools.image_generation import IMAGES_TOOLSET
from hermes_core.tools.images import vision_analyze_tool
from hermes_core.tools.isolation import configure_total
from hermes_core.tools.sandbox_settings import SandboxPolicy
from hermes_core.tools.skills import SKILLS_TOOLSET
from hermes_core.tools.toolsets import TOOLSETS, build_toolsets
from hermes_core.tools.web.guard import AddressPolicy
from server.budgets.admission import Budgets
from server.config import SIMULATOR_PROVIDER, HermesConfig, ProfileConfig
from server.config.schema import Budget as BudgetConfig
from server.deferred_providers import provider_of
from server.files.links import FileLinks, FileLinkSettings
from server.files.uploads import FileLimits
from server.http.auth import Budget, KeyRing, Principal
from server.profiles import Profile
from server.replicas.instance import instance_name
from server.retention.policy import retention_policy
from server.runs.approvals import ApprovalDesk
from server.runs.manager import RunManager
from server.services import Services
from server.sessions.service import SessionSettings
from server.simulator import SimulatorServer, SimulatorState
from server.telemetry.json_logs import mask
from server.webhooks.service import Webhooks, WebhookTarget

if TYPE_CHECKING:
    from hermes_core.tools.mcp.toolset import McpToolset
    from server.replicas.cluster import Cluster

log = logging.getLogger("hermes.bootstrap")


def build_services(config: HermesConfig) -> Services:
    """What ``create_app`` serves, built from a loaded configuration.

    Provider clients are created here, once: ``config`` must already carry the embedded
    simulator's address when it uses one (see :func:`upstreams`).
    """
    instance = config.server.instance or instance_name(config.server.data_dir)
    configure_total(config.server.sandboxes.total())
    cluster = _cluster_of(config, instance)
    return Services(
        profiles=build_profiles(config),
        keyring=keyring_of(config),
        runs=RunManager(
            max_runs=config.server.max_concurrent_runs,
            max_runs_per_owner=config.server.max_concurrent_runs_per_key,
            max_runs_per_user=config.limits.runs_per_user,
            redact=mask,
        ),
        stop_on_disconnect=config.server.stop_on_disconnect,
        drain_seconds=config.server.drain_seconds,
        max_body_bytes=config.server.max_body_bytes,
        max_crons_per_key=config.limits.crons_per_key,
        database_url=config.server.resolved_database_url,
        workspaces_dir=config.server.resolved_workspaces_dir,
        files_dir=config.server.resolved_files_dir,
        file_links=FileLinks(
            FileLinkSettings(
                data_dir=config.server.data_dir,
                public_url=config.server.public_url,
                link_seconds=config.server.file_link_seconds,
            )
        ),
        file_limits=FileLimits(
            max_file_bytes=config.server.files.max_file_bytes,
            quota_bytes=config.server.files.quota_bytes,
            max_files=config.server.files.max_files,
        ),
        instance=instance,
        cluster=cluster,
        # With replicas, runs learn from the ledger what the others spend as they go on.
        budgets=Budgets(
            refresh_seconds=config.limits.budget_refresh_seconds if cluster is not None else None
        ),
        migrate_on_start=config.server.migrate_on_start,
        responses_max_count=config.server.responses_max_count,
        responses_max_age_seconds=(
            config.server.responses_max_age_days * 86400
            if config.server.responses_max_age_days is not None
            else None
        ),
        approvals=ApprovalDesk(expiry_seconds=config.server.approval_timeout_seconds),
        address_policy=AddressPolicy.allowing(config.web.allow, own_ports=[config.server.port]),
        remote_mcp_connect_seconds=config.web.mcp_connect_timeout_seconds,
        session_settings=SessionSettings(
            busy=config.server.session_busy, wait_seconds=config.server.session_wait_seconds
        ),
        webhooks=Webhooks(webhook_targets(config)),
        retention=retention_policy(config),
    )


def webhook_targets(config: HermesConfig) -> list[WebhookTarget]:
    """The configured webhook endpoints (``webhooks:``)."""
    return [
        WebhookTarget(hook.url, hook.secret.get_secret_value(), frozenset(hook.events))
        for hook in config.webhooks
    ]


def keyring_of(config: HermesConfig) -> KeyRing:
    limits = config.limits
    return KeyRing(
        {
            e.key.get_secret_value(): Principal(
                e.principal,
                frozenset(e.profiles) if e.profiles is not None else None,
                trusted_front_end=e.trusted_front_end,
                admin=e.admin,
                budget=_budget(e.budget or limits.budget),
                end_user_budget=_budget(e.end_user_budget or limits.end_user_budget),
            )
            for e in config.server.api_keys
        }
    )


def _budget(budget: BudgetConfig | None) -> Budget | None:
    if budget is None:
        return None
    return Budget(
        tokens_per_day=budget.tokens_per_day, cost_per_month_usd=budget.cost_per_month_usd
    )


def build_profiles(config: HermesConfig) -> list[Profile]:
    """The agent profiles of ``config``, their provider clients and toolsets made."""
    return [_profile(config, profile) for profile in config.profiles]


def price_table(config: HermesConfig) -> PriceTable:
    """What model calls cost: the configuration's ``prices`` over the built-in table."""
    return PriceTable.with_defaults(
        {
            model: Price(
                input=price.input,
                output=price.output,
                cached_input=price.cached_input,
                cache_write=price.cache_write,
            )
            for model, price in config.prices.items()
        }
    )


def _profile(config: HermesConfig, profile: ProfileConfig) -> Profile:
    # An SDK-backed provider is built on its first use or serve's warm-up, after /health answers.
    retry = profile.retry.to_policy()
    chain = FallbackChain([provider_of(p) for p in config.chain(profile)], retry=retry)
    auxiliary = (
        FallbackChain([provider_of(p) for p in config.chain(profile, auxiliary=True)], retry=retry)
        if profile.auxiliary_providers
        else chain
    )
    options = profile.toolset_options(
        config.web.options(own_ports=[config.server.port]),
        workspace_key_mb=config.server.workspace_key_mb,
    )
    names = list(profile.tools)
    images: ImageChain | None = None
    if profile.image_providers:
        # Its image models make images: the images toolset is on, served by them.
        images = ImageChain([ImagesProvider(config.provider(n)) for n in profile.image_providers])
        options = dataclasses.replace(options, images=images)
        names.append(IMAGES_TOOLSET)
    toolsets = build_toolsets(names, options)
    vision: FallbackChain | None = None
    if profile.vision_providers and not all(p.vision for p in config.chain(profile)):
        # The main model may not see images: a vision chain looks at them for it.
        vision = FallbackChain(
            [provider_of(config.provider(name)) for name in profile.vision_providers],
            retry=retry,
        )
        toolsets.registry.register(vision_analyze_tool(vision))
    for name, reason in toolsets.unavailable.items():
        log.warning("profile %s: toolset %s stays off: %s", profile.id, name, reason)
    skills = load_directory_skills(profile.skills.dirs) if profile.skills.enabled else None
    active = (
        toolsets.active
        if skills is not None
        else [name for name in toolsets.active if name != SKILLS_TOOLSET]
    )
    if profile.sandbox.unsafe_no_sandbox and {"shell", "code"} & set(toolsets.active):
        log.warning(
            "profile %s: sandbox.unsafe_no_sandbox is set: shell and code commands run "
            "WITHOUT a sandbox and can read and change anything this server's user can",
            profile.id,
        )
    return Profile(
        id=profile.id,
        provider=chain,
        auxiliary=auxiliary if auxiliary is not chain else None,
        vision=vision,
        config=dataclasses.replace(
            profile.agent_config(), prices=price_table(config), max_cost_usd=profile.max_cost_usd
        ),
        tools=toolsets.registry,
        toolsets=active,
        unavailable_toolsets=toolsets.unavailable,
        context=CachingContext(
            PromptCacheSettings(ttl=profile.cache_ttl),
            inner=CompressingContext(Compressor(auxiliary)),
        ),
        openwebui=profile.openwebui,
        description=profile.description,
        session_busy=profile.session_busy,
        mcp=_mcp_of(profile),
        egress=_egress_of(options.policy),
        workspace_quota=options.quota,
        skills=skills,
        skills_approval=options.approval(TOOLSETS[SKILLS_TOOLSET]) != "never",
        skills_mounted=not options.policy.unsandboxed,
        learn_after=profile.learning.min_tool_calls if profile.learning.extract_skills else None,
        images=images,
    )


def _cluster_of(config: HermesConfig, instance: str) -> Cluster | None:
    """The replica set this server joins, when Redis is configured (only then is the Redis
    client imported)."""
    if config.server.redis_url is None:
        return None
    from server.replicas.cluster import Cluster
    from server.replicas.shared_volume import deployment_of

    return Cluster(
        config.server.redis_url.get_secret_value(),
        instance=instance,
        lease_seconds=config.server.lease_seconds,
        shared_dir=config.server.resolved_shared_dir,
        deployment=deployment_of(config.server.resolved_database_url),
    )


def _mcp_of(profile: ProfileConfig) -> McpToolset | None:
    """The profile's MCP servers, when it has any. The MCP SDK is not imported here: their
    connections load it on a worker thread once the loop runs (``connection.load_sdk``)."""
    if not profile.mcp_servers:
        return None
    from hermes_core.tools.mcp.toolset import McpToolset

    return McpToolset([s.spec() for s in profile.mcp_servers])


def _egress_of(policy: SandboxPolicy) -> EgressPolicy | None:
    """The egress policy the profile's commands would start a proxy for (the condition
    ``tools/sandbox.py`` applies), or None when they never start one."""
    if policy.network and not policy.unsandboxed:
        return policy.egress
    return None


@contextmanager
def upstreams(config: HermesConfig) -> Iterator[HermesConfig]:
    """``config`` with the embedded simulator running when it stands in for an upstream."""
    embedded = any(p.name == SIMULATOR_PROVIDER and p.base_url is None for p in config.providers)
    if not embedded:
        yield config
        return
    with SimulatorServer(SimulatorState()) as simulator:
        users = [p.id for p in config.profiles if SIMULATOR_PROVIDER in p.providers]
        log.warning(
            "no upstream model configured: the built-in simulator at %s answers %s. It is an "
            "offline demo, not a language model. To use a real model set HERMES_UPSTREAM_BASE_URL"
            " + HERMES_UPSTREAM_API_KEY + HERMES_UPSTREAM_MODEL, or ANTHROPIC_API_KEY, or "
            "OPENAI_API_KEY (see docs/configuration.md).",
            simulator.base_url,
            ", ".join(users) or "no profile",
        )
        yield config.with_simulator_base_url(simulator.base_url)
