"""Serving the ASGI app with uvicorn in several worker processes, the connections split evenly.

A keep-alive connection stays with the worker that accepted it, so how the connections fall
decides how the load falls: with 32 clients split 18/14, the busier worker's requests wait
18/16 as long as an even split would have them wait, and the slowest of them set the p99. The
two usual ways to share a port do not split evenly:

- uvicorn's own ``--workers`` share one listening socket and a burst of new connections goes to
  whichever worker wakes first: measured with ``bench/intake.py``, one worker often took all 32;
- one ``SO_REUSEPORT`` socket per worker (what this module did before) has the kernel pick by a
  hash of each connection: 32 connections over 2 workers fall like 32 coin flips (18/14 or
  worse in more than a third of runs; 14/18 measured on 2026-11-30).

So the workers share one listening socket and each accepts only while it holds no more
connections than the least loaded live worker (every worker publishes its count and a heartbeat
in a shared array). A worker that is not allowed to accept stops watching the socket and looks
again shortly; the least loaded live worker is always allowed, so a connection never waits for
a worker that will not take it. A worker whose heartbeat is older than ``STALE_S`` (dead,
restarting, or stuck) is not waited for.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE

log = logging.getLogger("future_ts.serving")

STALE_S = 2.0  # a worker silent this long is not waited for (uvicorn ticks every 0.1 s)
RETRY_S = 0.002  # a worker that may not accept looks at the counts again after this
BACKOFF_S = 0.1  # after accept() failed for want of file descriptors or memory


def uvicorn_config(app: str, host: str, port: int) -> uvicorn.Config:
    import gc
    import importlib

    # Import the app's modules now and move everything allocated so far out of the cyclic
    # GC's reach: it lives as long as the process, and a full collection scanned it all
    # again (about 45 ms with the models and the catalog loaded: a stall of every request
    # in flight on that worker, seen as the status GET's p99 in bench/intake.py).
    importlib.import_module(app.partition(":")[0])
    gc.freeze()
    return uvicorn.Config(app, factory=True, host=host, port=port, log_level="info",
                          proxy_headers=False)


class Board:
    """The shared array: per worker slot, its open connections and its last heartbeat
    (``time.monotonic()`` in milliseconds; 0 = not serving). Plain shared memory without a
    lock: each slot has one writer, and a reader that sees a count a moment old only lets a
    split be one connection off for that moment."""

    def __init__(self, cells: Any, workers: int) -> None:
        self.cells = cells
        self.workers = workers

    @classmethod
    def create(cls, ctx: Any, workers: int) -> Board:
        return cls(ctx.RawArray("q", 2 * workers), workers)

    def publish(self, slot: int, connections: int) -> None:
        self.cells[2 * slot] = connections
        self.cells[2 * slot + 1] = int(time.monotonic() * 1000)

    def retire(self, slot: int) -> None:
        self.cells[2 * slot] = 0
        self.cells[2 * slot + 1] = 0

    def may_accept(self, slot: int, connections: int) -> bool:
        """True if no live worker other than ``slot`` holds fewer than ``connections``."""
        now_ms = int(time.monotonic() * 1000)
        stale_ms = int(STALE_S * 1000)
        cells = self.cells
        for other in range(self.workers):
            if other == slot:
                continue
            beat = cells[2 * other + 1]
            if beat and now_ms - beat <= stale_ms and cells[2 * other] < connections:
                return False
        return True


class BalancedServer(uvicorn.Server):
    """A uvicorn server that accepts from a shared listening socket only while the ``Board``
    says it is its turn."""

    def __init__(self, config: uvicorn.Config, listener: socket.socket, board: Board,
                 slot: int) -> None:
        super().__init__(config)
        self.listener = listener
        self.board = board
        self.slot = slot
        self.opening = 0  # accepted, transport not made yet
        self.watching = False
        self.closed = False
        self.retry: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connecting: set[asyncio.Task[None]] = set()  # held until done (the loop won't)
        self.supervisor = os.getppid()

    # uvicorn's hooks -------------------------------------------------------------------------

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=[])  # the lifespan; no listener of uvicorn's own
        self.loop = asyncio.get_running_loop()
        self.listener.setblocking(False)
        self.publish()
        self.watch()

    async def on_tick(self, counter: int) -> bool:
        if os.getppid() != self.supervisor:
            # The supervisor is gone (killed): nobody would restart or stop this worker, and it
            # would keep the port. Stop as on SIGTERM: finish the requests in flight.
            log.error("api worker %d: supervisor %d gone; stopping", os.getpid(), self.supervisor)
            self.should_exit = True
        self.publish()  # the heartbeat, and the count after connections closed
        return await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.close()
        await super().shutdown(sockets=sockets)

    # accepting -------------------------------------------------------------------------------

    def connections(self) -> int:
        return len(self.server_state.connections) + self.opening

    def publish(self) -> None:
        if not self.closed:
            self.board.publish(self.slot, self.connections())

    def watch(self) -> None:
        assert self.loop is not None
        self.retry = None
        if not self.watching and not self.closed:
            self.loop.add_reader(self.listener.fileno(), self.accept)
            self.watching = True

    def unwatch(self, retry_s: float) -> None:
        assert self.loop is not None
        if self.watching:
            self.loop.remove_reader(self.listener.fileno())
            self.watching = False
        if self.retry is None and not self.closed:
            self.retry = self.loop.call_later(retry_s, self.watch)

    def close(self) -> None:
        self.closed = True
        if self.watching and self.loop is not None:
            self.loop.remove_reader(self.listener.fileno())
            self.watching = False
        if self.retry is not None:
            self.retry.cancel()
            self.retry = None
        self.board.retire(self.slot)
        self.listener.close()  # this process's descriptor; the other workers keep theirs

    def accept(self) -> None:
        """The listening socket is readable: take connections while it is this worker's turn."""
        while not self.closed:
            if not self.board.may_accept(self.slot, self.connections()):
                self.unwatch(RETRY_S)
                return
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return  # another worker took it
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS, ENOMEM: let some close first
                log.error("accept failed: %s", exc)
                self.unwatch(BACKOFF_S)
                return
            conn.setblocking(False)
            self.opening += 1
            self.publish()
            assert self.loop is not None
            task = self.loop.create_task(self.connect(conn))
            self.connecting.add(task)
            task.add_done_callback(self.connecting.discard)

    async def connect(self, conn: socket.socket) -> None:
        config = self.config
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: config.http_protocol_class(  # type: ignore[call-arg]
                    config=config, server_state=self.server_state,
                    app_state=self.lifespan.state),
                sock=conn)
        except OSError:
            conn.close()
        finally:
            self.opening -= 1


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def _serve_worker(app: str, host: str, port: int, listener: socket.socket, board: Board,
                  slot: int) -> None:
    """One worker process: serve from the shared ``listener`` in turn with the others."""
    config = uvicorn_config(app, host, port)
    BalancedServer(config, listener, board, slot).run()


def serve_uvicorn(app: str, host: str, port: int, workers: int) -> int:
    """Serve the ASGI app factory ``app`` with uvicorn in ``workers`` processes that share the
    connections evenly (see the module's docstring). This process only holds the port,
    restarts a worker that dies and stops them all on SIGINT/SIGTERM."""
    if workers <= 1:
        uvicorn.Server(uvicorn_config(app, host, port)).run()
        return 0
    listener = listening_socket(host, port, uvicorn.Config(app).backlog)
    try:
        return _supervise(app, host, port, workers, listener)
    finally:
        listener.close()


def _supervise(app: str, host: str, port: int, workers: int, listener: socket.socket) -> int:
    spawn = multiprocessing.get_context("spawn")
    board = Board.create(spawn, workers)
    stopping: list[int] = []

    def start(slot: int) -> Any:
        board.retire(slot)
        proc = spawn.Process(target=_serve_worker, args=(app, host, port, listener, board, slot),
                             daemon=False)
        proc.start()
        print(f"api worker {proc.pid} serving http://{host}:{port}", file=sys.stderr)
        return proc

    def stop(signum: int, _frame: Any) -> None:
        stopping.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    procs = [start(slot) for slot in range(workers)]
    code = 0
    while not stopping:
        time.sleep(0.5)
        for slot, proc in enumerate(procs):
            if proc.is_alive():
                continue
            if proc.exitcode == STARTUP_FAILURE:  # the app cannot start: restarting won't help
                stopping.append(0)
                code = STARTUP_FAILURE
                break
            print(f"api worker {proc.pid} exited ({proc.exitcode}); restarting", file=sys.stderr)
            procs[slot] = start(slot)
    _stop(procs)
    return code


def _stop(procs: Sequence[Any]) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.terminate()  # SIGTERM: uvicorn finishes the requests in flight
    for proc in procs:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join()
