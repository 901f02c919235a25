"""The engine process started by the RM plugin: ``python -m themis.yarn.engine``.

It connects to the Py4J gateway of the ResourceManager (its parent process, over loopback;
port and auth token from
``THEMIS_GATEWAY_PORT`` / ``THEMIS_GATEWAY_TOKEN`` or ``--port`` / ``--token``), starts a
callback server on an ephemeral port, registers an object implementing the Java interface
``org.themis.yarn.ThemisEngine`` and then serves rounds until the RM goes away.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol

from themis.mechanism.solvers import SolverError, make_solver
from themis.yarn.rounds import RoundEngine
from themis.yarn.settings import (
    EngineSettings,
    SettingError,
    arg_type,
    from_env,
    lease_seconds,
)

if TYPE_CHECKING:
    from themis.yarn.agents import AgentEndpoint

log = logging.getLogger("themis.yarn.engine")

JAVA_INTERFACE = "org.themis.yarn.ThemisEngine"


class Py4JEngine:
    """Py4J callback object; every method returns a str (never raises into Java)."""

    class Java:
        implements: ClassVar[list[str]] = [JAVA_INTERFACE]

    def __init__(
        self, rounds: RoundEngine, round_delay_s: float = 0.0, agent_address: str = "",
        expel: Callable[[str], bool] | None = None,
    ) -> None:
        self._rounds = rounds
        self._delay = round_delay_s
        self.agent_address = agent_address
        self._expel = expel  # ends a registration with the agents' endpoint
        self.started = time.time()

    def appEnded(self, app_id: str) -> str:
        """The RM says the app, or its AM attempt, ended: its registration ends now (an AM
        that stopped heart-beating has its attempt expired by the RM, which ends up here)."""
        try:
            ended = self._expel(app_id) if self._expel is not None else False
        except Exception as exc:  # never raise into Java
            log.warning("could not end %s's registration: %s", app_id, exc)
            ended = False
        return json.dumps({"ended": ended})

    def runRound(self, request_json: str) -> str:
        if self._delay > 0:
            time.sleep(self._delay)
        try:
            return self._rounds.run(request_json)
        except SolverError as exc:  # e.g. the view names a solver not installed: one line
            log.error("round failed: %s", exc)
            return json.dumps({"grants": [], "error": f"{type(exc).__name__}: {exc}"})
        except Exception as exc:  # reported to Java as an empty grant list
            log.exception("round failed")
            return json.dumps({"grants": [], "error": f"{type(exc).__name__}: {exc}"})

    def health(self) -> str:
        return json.dumps(
            {
                "ok": True,
                "pid": os.getpid(),
                "rounds": self._rounds.rounds,
                "agent_address": self.agent_address,
                "uptime_s": round(time.time() - self.started, 3),
            }
        )


class _RmRegistry(Protocol):
    """The RM's gateway entry point (Java ``EngineSupervisor.Registry``), as far as agents go."""

    def agentJoined(self, app_id: str) -> None: ...  # Java method names
    def agentLeft(self, app_id: str) -> None: ...
    def releaseGpus(self, app_id: str, gpu_ids_json: str) -> str: ...
    def verifyAmToken(self, app_id: str, token: str) -> str: ...
    def appLeases(self, app_id: str) -> str: ...


class RmLeases:
    """The agents' endpoint's lease owner: the RM, through its gateway. Registrations and
    departures seen before the gateway is up are passed on when it is (:meth:`attach`);
    a release before that is refused (the AM's agent retries nothing; its GPUs end with
    their lease)."""

    def __init__(self) -> None:
        self._rm: _RmRegistry | None = None
        self._early: list[tuple[str, str]] = []  # (event, app id) before attach
        self._lock = threading.Lock()

    def rm(self) -> _RmRegistry | None:
        """The RM's gateway entry point, None until :meth:`attach`."""
        return self._rm

    def attach(self, rm: _RmRegistry) -> None:
        with self._lock:
            self._rm = rm
            early, self._early = self._early, []
        for event, app_id in early:
            self._tell(rm, event, app_id)

    def _tell(self, rm: _RmRegistry, event: str, app_id: str) -> None:
        try:
            if event == "joined":
                rm.agentJoined(app_id)
            else:
                rm.agentLeft(app_id)
        except Exception as exc:  # the RM is going away: it forgets the app with it
            log.warning("could not tell the RM that %s %s: %s", app_id, event, exc)

    def _event(self, event: str, app_id: str) -> None:
        with self._lock:
            rm = self._rm
            if rm is None:
                self._early.append((event, app_id))
                return
        self._tell(rm, event, app_id)

    def joined(self, app_id: str) -> None:
        self._event("joined", app_id)

    def left(self, app_id: str) -> None:
        self._event("left", app_id)

    def release(self, app_id: str, gpu_ids: Sequence[str]) -> int:
        from themis.arbiter.errors import CallError, Code

        rm = self._rm
        if rm is None:
            raise CallError(Code.FAILED_PRECONDITION,
                            "the ResourceManager is not connected to the engine yet")
        try:
            reply = json.loads(rm.releaseGpus(app_id, json.dumps(list(gpu_ids))))
        except Exception as exc:
            raise CallError(Code.FAILED_PRECONDITION,
                            f"the ResourceManager did not take the release: {exc}") from exc
        if not reply.get("ok"):
            raise CallError(Code.INVALID_ARGUMENT, str(reply.get("error", "refused by the RM")))
        return int(reply.get("released", 0))

    def leases(self, app_id: str) -> list[tuple[str, int, float]]:
        """The app's live leases in the RM: (node id, GPUs, expiry in Unix seconds); none
        before the gateway is up or when the RM cannot say."""
        rm = self._rm
        if rm is None:
            return []
        try:
            raw = json.loads(rm.appLeases(app_id))
            return [(str(x["node_id"]), int(x["gpus"]), float(x["expiry_ms"]) / 1000.0)
                    for x in raw[:4096]]
        except Exception as exc:  # the RM is going away, or an older plugin
            log.warning("could not read %s's leases from the RM: %s", app_id, exc)
            return []


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Options; each one left out takes its environment variable's value (the RM plugin
    passes its yarn-site settings so, themis.yarn.settings), which raises SettingError when
    it is refused."""
    p = argparse.ArgumentParser(prog="python -m themis.yarn.engine", description=__doc__)
    p.add_argument("--port", type=arg_type("THEMIS_GATEWAY_PORT"), default=None,
                   help="the RM's Py4J gateway port (default: THEMIS_GATEWAY_PORT)")
    p.add_argument("--token", type=arg_type("THEMIS_GATEWAY_TOKEN"), default=None,
                   help="the gateway's auth token (default: THEMIS_GATEWAY_TOKEN)")
    p.add_argument(
        "--round-delay-s",
        type=float,
        default=0.0,
        help="sleep before each round (fault-injection tests: kill the engine mid-round)",
    )
    p.add_argument(
        "--agent-port",
        type=arg_type("THEMIS_AGENT_PORT"),
        default=None,
        help="serve the gRPC arbiter service for application masters on this port "
        "(0 = ephemeral, -1 = no agents: rounds use out-of-band reported bids only); "
        "the RM passes yarn.resourcemanager.themis.agent-port as THEMIS_AGENT_PORT",
    )
    p.add_argument(
        "--agent-host",
        type=arg_type("THEMIS_AGENT_HOST"),
        default=None,
        help="address the agents' endpoint binds to (default $THEMIS_AGENT_HOST, which the RM "
        "sets from yarn.resourcemanager.themis.agent-bind-host, its bind-host or its hostname; "
        "127.0.0.1 when run by hand without it)",
    )
    p.add_argument(
        "--agent-tls",
        choices=("on", "off"),
        default=os.environ.get("THEMIS_AGENT_TLS", "on"),
        help="serve the agents' endpoint over TLS (default on; off only when asked: the RM "
        "passes yarn.resourcemanager.themis.agent-tls.enabled as THEMIS_AGENT_TLS)",
    )
    p.add_argument(
        "--agent-tls-cert",
        default=os.environ.get("THEMIS_AGENT_TLS_CERT", ""),
        help="PEM certificate chain of the agents' endpoint (agent-tls.cert-file; "
        "THEMIS_AGENT_TLS_CERT)",
    )
    p.add_argument(
        "--agent-tls-key",
        default=os.environ.get("THEMIS_AGENT_TLS_KEY", ""),
        help="PEM private key of the agents' endpoint (agent-tls.key-file; THEMIS_AGENT_TLS_KEY)",
    )
    p.add_argument(
        "--bid-timeout-s",
        type=arg_type("THEMIS_BID_TIMEOUT_S"),
        default=None,
        help="how long a round waits for the offered apps' bids (default: "
        "THEMIS_BID_TIMEOUT_S, else 5)",
    )
    p.add_argument(
        "--max-apps",
        type=arg_type("THEMIS_MAX_APPS"),
        default=None,
        help="most apps registered with the agents' endpoint at once; RegisterApp beyond gets "
        "RESOURCE_EXHAUSTED (default: THEMIS_MAX_APPS, which the RM plugin sets from "
        "yarn.resourcemanager.themis.max-apps, else 4096)",
    )
    p.add_argument(
        "--lease-s",
        type=lease_seconds,
        default=None,
        help="lease duration announced to agents (the RM enforces it; default: "
        "THEMIS_LEASE_MS / 1000, else 600)",
    )
    args = p.parse_args(argv)
    env = from_env(os.environ)
    args.settings = env
    for name, value in (("port", env.gateway_port), ("token", env.gateway_token),
                        ("agent_port", env.agent_port), ("agent_host", env.agent_host),
                        ("bid_timeout_s", env.bid_timeout_s), ("lease_s", env.lease_s),
                        ("max_apps", env.max_apps)):
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def _agent_endpoint(
    args: argparse.Namespace, owner: RmLeases | None = None
) -> tuple[AgentEndpoint | None, str]:
    """Start the agents' gRPC endpoint when asked to; (bid source, "host:port")."""
    if args.agent_port < 0:
        return None, ""
    from themis.arbiter.config import ArbiterConfig
    from themis.yarn.agents import AgentEndpoint

    env: EngineSettings = getattr(args, "settings", None) or from_env(os.environ)
    config = ArbiterConfig(
        lease_s=args.lease_s,
        bid_timeout_s=args.bid_timeout_s,
        max_apps=args.max_apps,
        fairness_knob=env.fairness_knob,
        solver=env.solver,
        # yarn.resourcemanager.themis.ideal-time, announced to the AMs' agents
        ideal_time=env.ideal_time,
        # yarn.resourcemanager.themis.starvation: the filter's order of starving apps
        starvation=env.starvation,
    )
    from themis.rpc.tls import ServerTls
    from themis.yarn.auth import AmRmTokenRegistrar

    tls = ServerTls(args.agent_tls_cert, args.agent_tls_key) if args.agent_tls == "on" else None
    # registrations are checked by the RM (the AM's AMRMToken); without an RM (owner None:
    # tests) nobody could register, so there is no registrar either
    registrar = AmRmTokenRegistrar(owner.rm) if owner is not None else None
    endpoint = AgentEndpoint(config, owner=owner, registrar=registrar, tls=tls)
    address = endpoint.start(args.agent_port, host=args.agent_host)
    log.info("agents' endpoint (gRPC arbiter service) listening on %s (%s)", address,
             "TLS" if tls is not None else "plaintext: agent-tls.enabled=false")
    return endpoint, address


def _watch_parent(parent: int) -> None:
    """Exit when the RM that started us is gone (we are re-parented)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            log.warning("parent %d gone; engine exits", parent)
            os._exit(0)


def main(argv: Sequence[str] | None = None) -> int:
    # The RM that started us, read first: read after the gateway registration, an RM killed
    # in between would leave us watching our new parent (init) for ever.
    parent = os.getppid()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s"
    )
    try:
        args = _parse(argv)
    except SettingError as exc:
        print(f"themis.yarn.engine: {exc}", file=sys.stderr)
        return 2
    if args.port is None or not args.token:
        print(
            "themis.yarn.engine: need the gateway port and token (THEMIS_GATEWAY_PORT, "
            "THEMIS_GATEWAY_TOKEN or --port/--token); it is normally started by the RM plugin",
            file=sys.stderr,
        )
        return 2
    solver = args.settings.solver
    try:  # the RM's solver (yarn.resourcemanager.themis.solver): fail at start, in one line
        make_solver(solver)
    except SolverError as exc:
        print(f"themis.yarn.engine: solver {solver!r} (yarn.resourcemanager.themis.solver): "
              f"{exc}", file=sys.stderr)
        return 2
    from py4j.java_gateway import CallbackServerParameters, GatewayParameters, JavaGateway

    try:
        rm_leases = RmLeases()
        source, agent_address = _agent_endpoint(args, rm_leases)
    except (OSError, ValueError) as exc:
        print(f"themis.yarn.engine: cannot start the agents' endpoint: {exc}", file=sys.stderr)
        return 2
    expel = source.core.expel if source is not None else None
    engine = Py4JEngine(RoundEngine(source), args.round_delay_s, agent_address, expel)
    gateway = JavaGateway(
        gateway_parameters=GatewayParameters(
            address="127.0.0.1", port=args.port, auth_token=args.token
        ),
        callback_server_parameters=CallbackServerParameters(
            address="127.0.0.1",
            port=0,
            auth_token=args.token,
            daemonize=True,
            daemonize_connections=True,
        ),
    )
    # AMs' registrations, releases and departures go to the RM's lease table
    rm_leases.attach(gateway.entry_point)
    callback_port = gateway.get_callback_server().get_listening_port()
    gateway.entry_point.register(engine, callback_port)
    log.info(
        "registered with the RM gateway on port %d (callback port %d)", args.port, callback_port
    )
    watcher = threading.Thread(target=_watch_parent, args=(parent,), daemon=True)
    watcher.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        gateway.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
