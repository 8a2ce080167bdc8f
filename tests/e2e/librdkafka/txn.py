"""A librdkafka transactional producer and two consumers for the end-to-end tests.

Runs with Debian's python3-confluent-kafka (librdkafka). PLAN (JSON) is a list of
transactions {name, commit, records, offsets}: each runs in one transaction of the
producer TXN_ID, writing `records` values "<name>-<partition>-<i>" to every partition
0..PARTS-1 of TOPIC (the transaction named "done" writes "done" once per partition),
calling send_offsets_to_transaction for GROUP with `offsets` ({partition: offset} on
SOURCE) when given, then commit or abort. Afterwards a read_committed and a
read_uncommitted consumer read TOPIC from the start (assigned, no group) until each
partition gave "done"; a control record would show as a message. Prints one JSON line
{"committed": {p: [values]}, "uncommitted": {p: [values]}}. Exits 1 on any error or
after TIMEOUT_MS.
"""
import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

brokers = os.environ["BROKERS"]
topic = os.environ["TOPIC"]
source = os.environ["SOURCE"]
group = os.environ["GROUP"]
parts = int(os.environ["PARTS"])
plan = json.loads(os.environ["PLAN"])
deadline = time.monotonic() + int(os.environ.get("TIMEOUT_MS", "60000")) / 1000.0


def remaining():
    left = deadline - time.monotonic()
    if left <= 0:
        raise SystemExit("timed out")
    return left


def produce():
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    p = Producer({"bootstrap.servers": brokers, "transactional.id": os.environ["TXN_ID"],
                  "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    p.init_transactions(remaining())
    # send_offsets_to_transaction takes a consumer's group metadata; this consumer
    # never joins, so the metadata names GROUP with no generation (as Kafka allows).
    meta_consumer = Consumer({"bootstrap.servers": brokers, "group.id": group, "enable.auto.commit": False})
    for tx in plan:
        p.begin_transaction()
        for part in range(parts):
            if tx["name"] == "done":
                p.produce(topic, b"done", partition=part, on_delivery=on_delivery)
                continue
            for i in range(tx["records"]):
                p.produce(topic, f"{tx['name']}-{part}-{i}".encode(), partition=part, on_delivery=on_delivery)
        if p.flush(remaining()) != 0:
            raise SystemExit("flush did not finish")
        if errors:
            raise SystemExit(f"delivery failed: {errors[0]}")
        if tx.get("offsets"):
            offs = [TopicPartition(source, int(k), int(v)) for k, v in tx["offsets"].items()]
            p.send_offsets_to_transaction(offs, meta_consumer.consumer_group_metadata(), remaining())
        if tx["commit"]:
            p.commit_transaction(remaining())
        else:
            p.abort_transaction(remaining())
    meta_consumer.close()


def consume(isolation):
    c = Consumer({"bootstrap.servers": brokers, "group.id": f"{group}-{isolation}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": False})
    c.assign([TopicPartition(topic, part, 0) for part in range(parts)])
    got, finished = {}, set()
    while len(finished) < parts:
        msg = c.poll(min(1.0, remaining()))
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        part = msg.partition()
        if part in finished:
            continue
        value = msg.value().decode()
        if value == "done":
            finished.add(part)
            continue
        got.setdefault(str(part), []).append(value)
    c.close()
    return got


def main():
    produce()
    committed = consume("read_committed")
    uncommitted = consume("read_uncommitted")
    print(json.dumps({"committed": committed, "uncommitted": uncommitted}))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # any failure is the test's failure, with the reason
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
