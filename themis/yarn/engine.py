"""The engine process started by the RM plugin: ``python -m themis.yarn.engine``.

It connects to the Py4J gateway of the ResourceManager (loopback; port and auth token from
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
from collections.abc import Sequence
from typing import ClassVar

from themis.yarn.rounds import RoundEngine

log = logging.getLogger("themis.yarn.engine")

JAVA_INTERFACE = "org.themis.yarn.ThemisEngine"


class Py4JEngine:
    """Py4J callback object; every method returns a str (never raises into Java)."""

    class Java:
        implements: ClassVar[list[str]] = [JAVA_INTERFACE]

    def __init__(self, rounds: RoundEngine, round_delay_s: float = 0.0) -> None:
        self._rounds = rounds
        self._delay = round_delay_s
        self.started = time.time()

    def runRound(self, request_json: str) -> str:
        if self._delay > 0:
            time.sleep(self._delay)
        try:
            return self._rounds.run(request_json)
        except Exception as exc:  # reported to Java as an empty grant list
            log.exception("round failed")
            return json.dumps({"grants": [], "error": f"{type(exc).__name__}: {exc}"})

    def health(self) -> str:
        return json.dumps(
            {
                "ok": True,
                "pid": os.getpid(),
                "rounds": self._rounds.rounds,
                "uptime_s": round(time.time() - self.started, 3),
            }
        )


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m themis.yarn.engine", description=__doc__)
    p.add_argument("--port", type=int, default=int(os.environ.get("THEMIS_GATEWAY_PORT", "0")))
    p.add_argument("--token", default=os.environ.get("THEMIS_GATEWAY_TOKEN", ""))
    p.add_argument(
        "--round-delay-s",
        type=float,
        default=0.0,
        help="sleep before each round (fault-injection tests: kill the engine mid-round)",
    )
    return p.parse_args(argv)


def _watch_parent(parent: int) -> None:
    """Exit when the RM that started us is gone (we are re-parented)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            log.warning("parent %d gone; engine exits", parent)
            os._exit(0)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s"
    )
    args = _parse(argv)
    if args.port <= 0 or not args.token:
        print(
            "themis.yarn.engine: need the gateway port and token (THEMIS_GATEWAY_PORT, "
            "THEMIS_GATEWAY_TOKEN or --port/--token); it is normally started by the RM plugin",
            file=sys.stderr,
        )
        return 2
    from py4j.java_gateway import CallbackServerParameters, GatewayParameters, JavaGateway

    engine = Py4JEngine(RoundEngine(), args.round_delay_s)
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
    callback_port = gateway.get_callback_server().get_listening_port()
    gateway.entry_point.register(engine, callback_port)
    log.info(
        "registered with the RM gateway on port %d (callback port %d)", args.port, callback_port
    )
    watcher = threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True)
    watcher.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        gateway.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
