"""An asyncssh SFTP server on 127.0.0.1 (a free port), rooted in a folder, password auth."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

USERNAME = "obsbus"
PASSWORD = "sftp-Pw-7fK2-secret"


class SFTPServer:
    """Serves ``root`` over SFTP (chrooted) from a background event loop."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._acceptor = None

    def start(self) -> SFTPServer:
        import asyncssh

        class Auth(asyncssh.SSHServer):
            def begin_auth(self, username):
                return True

            def password_auth_supported(self):
                return True

            def validate_password(self, username, password):
                return username == USERNAME and password == PASSWORD

        root = str(self.root)

        async def listen():
            key = asyncssh.generate_private_key("ssh-ed25519")
            return await asyncssh.listen(
                "127.0.0.1",
                self.port,
                server_host_keys=[key],
                server_factory=Auth,
                sftp_factory=lambda chan: asyncssh.SFTPServer(chan, chroot=root),
            )

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._acceptor = asyncio.run_coroutine_threadsafe(listen(), self._loop).result(20)
        self.port = self._acceptor.get_port()
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        async def close():
            self._acceptor.close()
            await self._acceptor.wait_closed()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:  # connections still open: end them, so nothing is left pending
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(20)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(20)
        self._loop.close()
        self._loop = None
