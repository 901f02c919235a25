"""Where the AM's services bind and what they advertise on a multi-host cluster: nothing
falls back to loopback when the cluster's configuration names a host."""

from __future__ import annotations

import pytest

from themis.agent.endpoints import AGENT_ADDRESS_KEY, AGENT_PORT_KEY
from themis.am.launchers.yarn.commands import default_arbiter
from themis.am.launchers.yarn.http import http_hosts, url_host
from themis.client.cluster import Cluster


def test_am_http_advertises_the_nodemanager_host_and_binds_it() -> None:
    assert http_hosts({"NM_HOST": "nm2"}) == ("nm2", "nm2")
    assert http_hosts({"NM_HOST": "nm2", "THEMIS_AM_BIND_HOST": "0.0.0.0"}) == ("0.0.0.0", "nm2")
    assert http_hosts({"NM_HOST": "nm2", "THEMIS_AM_HOST": "10.0.0.7"}) == ("10.0.0.7", "10.0.0.7")
    assert http_hosts({}) == ("127.0.0.1", "127.0.0.1")  # outside YARN (no NM_HOST)
    assert url_host("fd00::5") == "[fd00::5]" and url_host("nm1") == "nm1"


def test_am_finds_the_agents_endpoint_in_the_cluster_conf() -> None:
    def conf(values: dict[str, str]):  # type: ignore[no-untyped-def]
        return lambda k, d: values.get(k, d)

    assert default_arbiter(conf({"yarn.resourcemanager.hostname": "rm"})) == "rm:8642"
    assert default_arbiter(conf({"yarn.resourcemanager.hostname": "rm",
                                 AGENT_PORT_KEY: "9000"})) == "rm:9000"
    assert default_arbiter(conf({AGENT_ADDRESS_KEY: "proxy:443",
                                 "yarn.resourcemanager.hostname": "rm"})) == "proxy:443"
    with pytest.raises(SystemExit, match="agents' endpoint"):
        default_arbiter(conf({"yarn.resourcemanager.hostname": "0.0.0.0"}))


@pytest.mark.parametrize(("rm_host", "rm_url", "want"), [
    ("rm", "http://172.31.0.4:8088", "rm:8642"),
    ("0.0.0.0", "http://172.31.0.4:8088", "172.31.0.4:8642"),
    ("localhost", "http://rm.example.com:8088", "rm.example.com:8642"),
    ("", "http://[fd00::4]:8088", "[fd00::4]:8642"),
])
def test_client_tells_the_ams_a_reachable_agents_endpoint(rm_host: str, rm_url: str,
                                                          want: str) -> None:
    c = Cluster(rm_url=rm_url)
    assert c.arbiter_address({"yarn.resourcemanager.hostname": rm_host}) == want
    assert c.arbiter_address({AGENT_ADDRESS_KEY: "gw:1"}) == "gw:1"


def test_endpoint_bound_to_an_ipv6_host_reports_an_address_clients_take() -> None:
    from themis.agent.client import check_address
    from themis.yarn.agents import AgentEndpoint

    e = AgentEndpoint()
    try:
        address = e.start(0, host="::1")
    except OSError as exc:  # no IPv6 on this machine
        pytest.skip(str(exc))
    try:
        assert address.startswith("[::1]:"), address
        assert check_address(address) == address
    finally:
        e.stop()
