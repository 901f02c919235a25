"""A slow link between a mini-cluster host and another: a TCP relay that holds every byte
one side sends for a fixed time before passing it on (issue 35's "2 s added latency").

The mini-cluster's kernel has no ``netem`` queueing discipline (``tc qdisc ... netem``:
"Specified qdisc kind is unknown"; CONFIG_NET_SCH_NETEM is not set), so the delay is made
in user space: :class:`DelayRelay` listens on this machine's address on the mini-cluster
network, and NAT rules in the slowed host's network namespace (:func:`slow_rules`) send
that host's new connections to the target's ports through it. Packets of connections
opened before are refused with a TCP reset, so that the host's clients reconnect - through
the relay. Healing deletes the rules and closes the relay's connections; the clients
reconnect directly.

The relay delays what the slowed host sends (its requests, its bids) by ``delay_s``, so
each round trip to the target takes ``delay_s`` longer, as ``netem delay`` on the host's
egress would for that traffic; byte order and TCP's flow control are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Sequence


class DelayRelay:
    """Relays ``listen_host``:(one port per target port) -> ``target``:port, the client's
    bytes held ``delay_s`` seconds. :meth:`start` returns target port -> relay port."""

    def __init__(self, listen_host: str, target: str, ports: Sequence[int],
                 delay_s: float) -> None:
        self.listen_host, self.target, self.ports, self.delay_s = (
            listen_host, target, tuple(ports), delay_s)
        self.relay_ports: dict[int, int] = {}
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="delay-relay",
                                        daemon=True)
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> dict[int, int]:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.relay_ports = fut.result(timeout=10)
        return self.relay_ports

    def stop(self) -> None:
        """Close the listeners and every relayed connection."""
        async def close() -> None:
            for s in self._servers:
                s.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    async def _listen(self) -> dict[int, int]:
        out = {}
        for port in self.ports:
            server = await asyncio.start_server(self._handler(port), self.listen_host, 0)
            self._servers.append(server)
            out[port] = server.sockets[0].getsockname()[1]
        return out

    def _handler(self, port: int) -> Callable[
            [asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)  # (closed by stop())
            try:
                await self._relay(r, w, port)
            except asyncio.CancelledError:
                pass  # stop(): the connection closes (not an error to log)
            finally:
                self._tasks.discard(task)
        return handle

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                     port: int) -> None:
        self.connections += 1
        try:
            up_r, up_w = await asyncio.open_connection(self.target, port)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(self._pipe(client_r, up_w, self.delay_s),
                                 self._pipe(up_r, client_w, 0.0))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (client_w, up_w):
                with contextlib.suppress(Exception):
                    w.close()

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    delay_s: float) -> None:
        """Copy ``src`` to ``dst``, each chunk sent ``delay_s`` after it was read (a queue
        keeps the order; reading goes on meanwhile, as packets in flight would)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not data:  # the end of the stream is held like the bytes before it
                    with contextlib.suppress(Exception):
                        dst.write_eof()
                    return
                dst.write(data)
                await dst.drain()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await src.read(65536)
                queue.put_nowait((time.monotonic() + delay_s, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()


def slow_rules(op: str, target: str, relay_host: str, relay_ports: dict[int, int]
               ) -> list[list[str]]:
    """``iptables`` argument lists (``op``: I to add, D to delete) for the slowed host's
    namespace: its new connections to ``target``'s ports go to the relay (nat OUTPUT), and
    packets still sent to ``target``'s ports directly (connections from before) get a TCP
    reset."""
    flag = "-" + op.lstrip("-")
    rules = [["-t", "nat", flag, "OUTPUT", "-d", target, "-p", "tcp", "--dport", str(port),
              "-j", "DNAT", "--to-destination", f"{relay_host}:{relay}"]
             for port, relay in relay_ports.items()]
    ports = ",".join(str(p) for p in relay_ports)
    rules.append([flag, "OUTPUT", "-d", target, "-p", "tcp", "-m", "multiport", "--dports",
                  ports, "-j", "REJECT", "--reject-with", "tcp-reset"])
    return rules
