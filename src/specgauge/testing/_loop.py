"""The lifecycle both test servers share: an asyncio server on its own loop in a daemon thread,
``with Server(...) as s: s.base_url``. A subclass gives ``_start`` (start serving on the running loop,
set ``port``, return the server)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, ClassVar, Self


class ThreadedServer:
    what: ClassVar[str] = "test server"  #: for the error when it does not start
    start_timeout_s: ClassVar[float] = 10.0
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    def _init_lifecycle(self) -> None:
        self._loop, self._thread, self._ready = None, None, threading.Event()

    async def _start(self) -> asyncio.base_events.Server:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run_thread, daemon=True, name=self.what.replace(" ", "-"))
        self._thread.start()
        if not self._ready.wait(self.start_timeout_s):
            raise RuntimeError(f"{self.what} did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run_thread(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        server = loop.run_until_complete(self._start())
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            for t in asyncio.all_tasks(loop):
                t.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()
