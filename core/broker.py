"""The embedded mode's Celery broker: kombu's filesystem transport, each message written whole
before it appears in the queue folder.

kombu's own filesystem channel creates a message's file in the queue folder and then writes into
it; a worker listing the folder in between takes the still-empty file, fails to decode it and
stops (a known race of that transport), which under `./portal run` stops every process. Here the
message is written into a staging folder beside the queue and renamed into place (one atomic step on
one filesystem), so a reader sees either no file or the whole message. Everything else is kombu's.
Selected by `CELERY_BROKER_TRANSPORT` in settings when no Redis is configured.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    @property
    def staging_folder(self) -> Path:
        """Where a message is written before it is renamed into the queue (transport option
        `staging_folder`; by default a sibling of the queue folder, on the same filesystem)."""
        configured = self.transport_options.get("staging_folder")
        return Path(configured) if configured else Path(f"{str(self.data_folder_out).rstrip(os.sep)}.staging")

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        # The name sorts like kombu's own (milliseconds first), so messages keep their order.
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        staged = self.staging_folder / name
        try:
            staged.parent.mkdir(parents=True, exist_ok=True)
            staged.write_bytes(str_to_bytes(dumps(payload)))
            os.replace(staged, Path(self.data_folder_out) / name)
        except OSError as exc:
            staged.unlink(missing_ok=True)
            raise ChannelError(
                f"Cannot add file {name!r} to the queue folder {self.data_folder_out}"
            ) from exc


class FilesystemTransport(filesystem.Transport):
    Channel = Channel
