"""The embedded broker: kombu's filesystem transport with whole-file messages.

kombu's filesystem transport creates a message file in the queue folder and only then writes it, while a
consumer moves and reads any file it finds there. A consumer that comes between the two reads an empty file, fails
to decode it and stops the worker ("Unrecoverable error: JSONDecodeError"), and the message is gone, so its job
stays queued for ever (seen in the integration suite: a job submitted 2 ms before the worker polled). Here a
message is written under a temporary name the consumer does not match and then renamed into place (`os.replace`
is atomic within a folder), so consumers only ever see whole messages; and a file that still does not decode
(put there by something else) is logged and skipped rather than stopping the worker.

Celery reaches this transport through the alias `EMBEDDED_SCHEME` (`service.queue.celery_config`).
"""

from __future__ import annotations

import logging
import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

logger = logging.getLogger("parvis.broker")

EMBEDDED_SCHEME = "parvisfs"


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        # the name kombu's consumer expects: sorted by the millisecond prefix, matched on ".{queue}.msg"
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        temporary = os.path.join(self.data_folder_out, f".{name}.part")  # partition('.') leaves no queue match
        try:
            with open(temporary, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(temporary, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _get(self, queue: str) -> Any:
        while True:
            try:
                return super()._get(queue)  # raises Empty when no message is left
            except ValueError as exc:  # the file was already taken off the queue: drop it, keep the worker
                logger.error("dropped an undecodable message file from queue %s: %s", queue, exc)


class Transport(filesystem.Transport):
    Channel = Channel


TRANSPORT_ALIASES[EMBEDDED_SCHEME] = f"{__name__}:Transport"
