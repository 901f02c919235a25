"""Where an application master's agent reaches the agents' endpoint (docs/yarn.md, "Restart
and HA").

The endpoint runs in the engine of the *active* ResourceManager only. Without RM HA there is
one candidate: ``yarn.resourcemanager.themis.agent-address`` if set, else
``<yarn.resourcemanager.hostname>:<agent-port>``. With RM HA (``yarn.resourcemanager.ha.enabled``
and ``yarn.resourcemanager.ha.rm-ids``) there is one candidate per RM id, in the ids' order,
read the way the plugin reads its own per-RM keys (``ThemisSettings.perRm``):

* ``agent-address.<id>``, else ``agent-address``, else
* host: ``yarn.resourcemanager.hostname.<id>``, else the host of
  ``yarn.resourcemanager.address.<id>``, else ``yarn.resourcemanager.hostname``;
  port: ``agent-port.<id>``, else ``agent-port``, else 8642.

So a shared ``agent-address`` and no per-RM one names a fixed front (a proxy or virtual IP
that follows the active RM): it is the only candidate. The agent client
(:class:`themis.agent.client.AgentClient`) takes the candidates as one comma-separated string
and moves to the next one when the current one is unreachable: a standby serves no endpoint.
"""

from __future__ import annotations

from collections.abc import Callable

PREFIX = "yarn.resourcemanager.themis."
AGENT_PORT_KEY = PREFIX + "agent-port"
AGENT_ADDRESS_KEY = PREFIX + "agent-address"
DEFAULT_AGENT_PORT = "8642"  # ThemisSettings' default
HA_ENABLED_KEY = "yarn.resourcemanager.ha.enabled"
HA_IDS_KEY = "yarn.resourcemanager.ha.rm-ids"
RM_HOSTNAME_KEY = "yarn.resourcemanager.hostname"
RM_ADDRESS_KEY = "yarn.resourcemanager.address"

#: a configuration lookup: the key's value, "" when unset
Lookup = Callable[[str], str]


def _host(value: str) -> str:
    """A host as agents dial it: the wildcard and ``localhost`` mean this machine."""
    host = value.strip() or "127.0.0.1"
    return "127.0.0.1" if host in ("0.0.0.0", "localhost") else host


def agent_addresses(get: Lookup) -> list[str]:
    """The candidate ``host:port`` addresses of the agents' endpoint, most likely first."""
    shared = get(AGENT_ADDRESS_KEY).strip()
    ids = [i.strip() for i in get(HA_IDS_KEY).split(",") if i.strip()]
    if get(HA_ENABLED_KEY).strip().lower() != "true" or not ids:
        if shared:
            return [shared]
        port = get(AGENT_PORT_KEY).strip() or DEFAULT_AGENT_PORT
        return [f"{_host(get(RM_HOSTNAME_KEY))}:{port}"]
    out: list[str] = []
    for i in ids:
        addr = get(f"{AGENT_ADDRESS_KEY}.{i}").strip() or shared
        if not addr:
            host = get(f"{RM_HOSTNAME_KEY}.{i}").strip()
            if not host:
                host = get(f"{RM_ADDRESS_KEY}.{i}").strip().rpartition(":")[0]
            if not host:
                host = get(RM_HOSTNAME_KEY)
            port = (get(f"{AGENT_PORT_KEY}.{i}").strip() or get(AGENT_PORT_KEY).strip()
                    or DEFAULT_AGENT_PORT)
            addr = f"{_host(host)}:{port}"
        if addr not in out:
            out.append(addr)
    return out


def parse_addresses(value: str) -> list[str]:
    """``"a:1, b:2"`` -> ``["a:1", "b:2"]`` (order kept, duplicates and blanks dropped)."""
    out: list[str] = []
    for part in value.split(","):
        addr = part.strip()
        if addr and addr not in out:
            out.append(addr)
    return out


def from_mapping(conf: dict[str, str]) -> Lookup:
    """A lookup over a configuration already read into a dict (e.g. the RM's ``/conf``)."""
    return lambda key: conf.get(key, "") or ""
