// A kafkajs transactional producer and two consumers for the end-to-end tests.
// PLAN (JSON) is a list of transactions {name, commit, records, offsets}: each runs in
// one kafkajs transaction on the producer TXN_ID, writing `records` values
// "<name>-<partition>-<i>" to every partition 0..PARTS-1 of TOPIC (the transaction
// named "done" writes the value "done" once per partition), calling sendOffsets for
// GROUP with `offsets` ({partition: offset} on SOURCE) when given, then commit or abort.
// Afterwards a read_committed and a read_uncommitted kafkajs consumer (own groups)
// read TOPIC from the start until each partition gave "done", and the script prints
// one JSON line {"committed": {p: [values]}, "uncommitted": {p: [values]}}.
// Exits 1 on any error or after TIMEOUT_MS.
const { Kafka, logLevel } = require('kafkajs');

const brokers = process.env.BROKERS.split(',');
const topic = process.env.TOPIC;
const source = process.env.SOURCE;
const group = process.env.GROUP;
const parts = parseInt(process.env.PARTS, 10);
const plan = JSON.parse(process.env.PLAN);
const timeoutMs = parseInt(process.env.TIMEOUT_MS || '60000', 10);

const kafka = new Kafka({ clientId: 'kafkajs-txn-e2e', brokers, logLevel: logLevel.WARN, retry: { retries: 10 } });

async function produce() {
  const producer = kafka.producer({ transactionalId: process.env.TXN_ID, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  for (const tx of plan) {
    const txn = await producer.transaction();
    const messages = [];
    for (let p = 0; p < parts; p++) {
      if (tx.name === 'done') {
        messages.push({ partition: p, value: 'done' });
        continue;
      }
      for (let i = 0; i < tx.records; i++) messages.push({ partition: p, value: `${tx.name}-${p}-${i}` });
    }
    await txn.send({ topic, messages });
    if (tx.offsets) {
      const partitions = Object.entries(tx.offsets).map(([p, o]) => ({ partition: parseInt(p, 10), offset: String(o) }));
      await txn.sendOffsets({ consumerGroupId: group, topics: [{ topic: source, partitions }] });
    }
    if (tx.commit) await txn.commit();
    else await txn.abort();
  }
  await producer.disconnect();
}

async function consume(readUncommitted) {
  const consumer = kafka.consumer({ groupId: `${group}-read-${readUncommitted ? 'uncommitted' : 'committed'}`, readUncommitted, sessionTimeout: 10000, heartbeatInterval: 1000 });
  const got = {};
  const finished = new Set();
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let resolveDone;
  const done = new Promise((r) => { resolveDone = r; });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      if (finished.has(partition)) return;
      const v = message.value.toString();
      if (v === 'done') {
        finished.add(partition);
        if (finished.size === parts) resolveDone();
        return;
      }
      (got[partition] = got[partition] || []).push(v);
    },
  });
  await done;
  await consumer.disconnect();
  return got;
}

async function main() {
  const timer = setTimeout(() => {
    console.error(`timed out after ${timeoutMs} ms`);
    process.exit(1);
  }, timeoutMs);
  await produce();
  const committed = await consume(false);
  const uncommitted = await consume(true);
  clearTimeout(timer);
  console.log(JSON.stringify({ committed, uncommitted }));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
