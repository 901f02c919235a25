"""The YARN side of the application master as the Python controller sees it: the
:class:`Shell` protocol (the JVM AM shell's operations, ``org.themis.am.AmShell``) and
:class:`JvmShell`, its Py4J implementation. Tests use a fake shell."""

from __future__ import annotations

from typing import Any, Protocol


class Shell(Protocol):
    """The JVM shell's operations (org.themis.am.AmShell), in Python names."""

    def start(self, host: str, rpc_port: int, tracking_url: str, heartbeat_ms: int) -> str: ...

    def request(self, host: str, memory_mb: int, vcores: int, gpus: int, priority: int
                ) -> int: ...

    def cancel_request(self, request_id: int) -> None: ...

    def nodes(self) -> str: ...

    def launch(self, container: str, command: str, env_json: str) -> None: ...

    def stop_container(self, container: str) -> None: ...

    def release(self, container: str) -> None: ...

    def poll_events(self, timeout_ms: int) -> str: ...

    def set_progress(self, p: float) -> None: ...

    def finish(self, status: str, message: str, tracking_url: str) -> None: ...


class JvmShell:
    """:class:`Shell` over the Py4J entry point (camelCase Java methods)."""

    def __init__(self, entry_point: Any) -> None:
        self._ep = entry_point

    def start(self, host: str, rpc_port: int, tracking_url: str, heartbeat_ms: int) -> str:
        return str(self._ep.start(host, rpc_port, tracking_url, heartbeat_ms))

    def request(self, host: str, memory_mb: int, vcores: int, gpus: int, priority: int
                ) -> int:
        return int(self._ep.request(host, memory_mb, vcores, gpus, priority))

    def cancel_request(self, request_id: int) -> None:
        self._ep.cancelRequest(request_id)

    def nodes(self) -> str:
        return str(self._ep.nodes())

    def launch(self, container: str, command: str, env_json: str) -> None:
        self._ep.launch(container, command, env_json)

    def stop_container(self, container: str) -> None:
        self._ep.stopContainer(container)

    def release(self, container: str) -> None:
        self._ep.release(container)

    def poll_events(self, timeout_ms: int) -> str:
        return str(self._ep.pollEvents(timeout_ms))

    def set_progress(self, p: float) -> None:
        self._ep.setProgress(float(p))

    def finish(self, status: str, message: str, tracking_url: str) -> None:
        self._ep.finish(status, message, tracking_url)
