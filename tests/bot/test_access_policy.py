"""The access policy every platform shares: users, roles, workspaces (Discord guilds),
channels (a thread counts as its parent channel), admins and DMs."""

from __future__ import annotations

from bot.access import AccessPolicy


def _policy(**lists: list[str]) -> AccessPolicy:
    return AccessPolicy.from_lists(
        allowed_users=lists.get("users", []),
        allowed_channels=lists.get("channels", []),
        admins=lists.get("admins", []),
        dm_enabled=not lists.get("no_dm"),
        allowed_workspaces=lists.get("guilds", []),
        allowed_roles=lists.get("roles", []),
    )


def test_empty_lists_allow_everyone_everywhere() -> None:
    assert _policy().refusal("u", "c", is_dm=False, workspace="g") is None
    assert _policy().refusal("u", "d", is_dm=True) is None


def test_roles_admit_people_not_on_the_user_list() -> None:
    policy = _policy(users=["alice"], roles=["r-eng"])
    assert policy.refusal("alice", "c", is_dm=False) is None
    assert policy.refusal("bob", "c", is_dm=False, roles=["r-eng", "r-x"]) is None
    refused = policy.refusal("carol", "c", is_dm=False, roles=["r-sales"])
    assert refused is not None and "allowed users" in refused


def test_only_allowed_guilds() -> None:
    policy = _policy(guilds=["g1"])
    assert policy.refusal("u", "c", is_dm=False, workspace="g1") is None
    refused = policy.refusal("u", "c", is_dm=False, workspace="g2")
    assert refused is not None and "server" in refused
    assert policy.refusal("u", "d", is_dm=True) is None  # a DM has no guild


def test_a_thread_is_allowed_through_its_parent_channel() -> None:
    policy = _policy(channels=["c1"])
    assert policy.refusal("u", "thread-9", is_dm=False, parent_channel="c1") is None
    refused = policy.refusal("u", "thread-9", is_dm=False, parent_channel="c2")
    assert refused is not None and "channel" in refused


def test_admins_pass_everything_and_dms_can_be_off() -> None:
    policy = _policy(users=["alice"], guilds=["g1"], channels=["c1"], admins=["root"], no_dm=["x"])
    assert policy.refusal("root", "c9", is_dm=False, workspace="g9") is None
    refused = policy.refusal("alice", "d", is_dm=True)
    assert refused is not None and "direct messages" in refused
