"""The embedded broker (service/embedded_broker.py): kombu's filesystem transport with whole-file messages.

Stock kombu creates a message file and then writes it; a consumer between the two read an empty file, and the
worker stopped with JSONDecodeError (the integration suite caught it once). These tests use real kombu
connections on a temporary folder."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Queue
from kombu.utils.json import dumps as json_dumps

from service.embedded_broker import EMBEDDED_SCHEME
from service.queue import celery_config
from service.settings import Settings


def options(folder: Path) -> dict[str, object]:
    for name in ("queue", "processed", "control"):
        (folder / name).mkdir(exist_ok=True)
    return {"data_folder_in": str(folder / "queue"), "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"), "control_folder": str(folder / "control"),
            "store_processed": False, "polling_interval": 0.01}


def connection(scheme: str, folder: Path) -> Connection:
    return Connection(f"{scheme}://", transport_options=options(folder))


def fresh_name() -> str:
    """A queue name of its own per test: kombu's virtual transports keep declared exchanges and bindings in
    class-level state, so a name declared by an earlier test (in another folder) would skip writing this
    folder's exchange table and the message would route nowhere."""
    return f"q{uuid.uuid4().hex[:12]}"


def test_celery_uses_the_embedded_transport_only_for_the_embedded_broker(tmp_path: Path) -> None:
    assert celery_config(Settings(data_dir=tmp_path))["broker_url"] == f"{EMBEDDED_SCHEME}://"
    assert celery_config(Settings(data_dir=tmp_path, broker_url="redis://127.0.0.1:6379/0"))["broker_url"] == \
        "redis://127.0.0.1:6379/0"


def test_a_message_appears_whole_under_the_consumer_s_name(tmp_path: Path) -> None:
    name = fresh_name()
    with connection(EMBEDDED_SCHEME, tmp_path) as conn:
        conn.SimpleQueue(name).put({"job": 1})
        names = [p.name for p in (tmp_path / "queue").iterdir()]
        assert len(names) == 1 and names[0].endswith(f".{name}.msg") and not names[0].startswith(".")
        assert (tmp_path / "queue" / names[0]).stat().st_size > 0


@pytest.mark.parametrize(("scheme", "module"), [("filesystem", "kombu.transport.filesystem"),
                                                 (EMBEDDED_SCHEME, "service.embedded_broker")])
def test_no_consumable_file_exists_while_a_message_is_being_written(tmp_path: Path, scheme: str, module: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """What a consumer polling during a put could see: stock kombu has the (still empty) message file in place
    while it serialises the payload; the embedded transport has only its temporary file."""
    name, seen = fresh_name(), []

    def watching_dumps(payload: object) -> str:
        seen.extend(p.name for p in (tmp_path / "queue").iterdir() if p.name.partition(".")[2] == f"{name}.msg")
        return json_dumps(payload)

    monkeypatch.setattr(f"{module}.dumps", watching_dumps)
    with connection(scheme, tmp_path) as conn:
        conn.SimpleQueue(name).put({"job": 3})
    assert bool(seen) == (scheme == "filesystem"), seen


@pytest.mark.parametrize(("scheme", "survives"), [("filesystem", False), (EMBEDDED_SCHEME, True)])
def test_an_empty_message_file_stops_stock_kombu_but_is_skipped_here(tmp_path: Path, scheme: str,
                                                                    survives: bool) -> None:
    """The state the race leaves: a matching, still empty file ahead of a real message."""
    name = fresh_name()
    with connection(scheme, tmp_path) as conn:
        queue = conn.SimpleQueue(name)
        # kombu takes files in string order and names them "{monotonic ms}_...": "0_" sorts ahead of any of them
        # ("1_torn" did not: after "1234567_..." on a machine whose uptime began with 1)
        (tmp_path / "queue" / f"0_torn.{name}.msg").write_bytes(b"")
        queue.put({"job": 2})
        if not survives:
            with pytest.raises(ValueError):
                queue.get(timeout=1)
            return
        message = queue.get(timeout=1)
        assert message.payload == {"job": 2}
        message.ack()


def test_concurrent_producers_lose_no_message(tmp_path: Path) -> None:
    """4 producer threads × 50 messages while one consumer drains the queue: all 200 arrive, each once."""
    name = fresh_name()
    exchange = Exchange(name, type="direct")
    queue = Queue(name, exchange, routing_key=name)
    received: list[int] = []

    def produce(start: int) -> None:
        with connection(EMBEDDED_SCHEME, tmp_path) as conn:
            producer = conn.Producer(serializer="json")
            for k in range(start, start + 50):
                producer.publish({"n": k}, exchange=exchange, routing_key=name, declare=[queue])

    with connection(EMBEDDED_SCHEME, tmp_path) as conn:
        queue(conn.default_channel).declare()
        threads = [threading.Thread(target=produce, args=(50 * i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        with conn.Consumer(queue, callbacks=[lambda body, message: (received.append(body["n"]), message.ack())]):
            while len(received) < 200:
                conn.drain_events(timeout=10)
        for thread in threads:
            thread.join()
    assert sorted(received) == list(range(200))
