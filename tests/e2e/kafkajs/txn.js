// A kafkajs transactional producer for the end-to-end tests. On TOPIC (2 partitions)
// it commits c1-00..09, aborts ab-00..09, commits c2-00..09, then commits c3-00..09
// together with the offset OFFSET of TOPIC partition 0 for GROUP (sendOffsets), and
// finally commits one "done" per partition. Prints {"ok": true}; exits 1 on any error.
const { Kafka, logLevel } = require('kafkajs');

const brokers = process.env.BROKERS.split(',');
const topic = process.env.TOPIC;
const groupId = process.env.GROUP;
const transactionalId = process.env.TID;
const offset = process.env.OFFSET;

function values(prefix) {
  const out = [];
  for (let i = 0; i < 10; i++) out.push(`${prefix}-${String(i).padStart(2, '0')}`);
  return out;
}

async function txn(producer, vals, end, offsets) {
  const t = await producer.transaction();
  try {
    await t.send({ topic, messages: vals.map((v, i) => ({ value: v, partition: i % 2 })) });
    if (offsets) await t.sendOffsets(offsets);
  } catch (e) {
    await t.abort();
    throw e;
  }
  if (end === 'commit') await t.commit();
  else await t.abort();
}

async function main() {
  const kafka = new Kafka({ clientId: 'kafkajs-txn-e2e', brokers, logLevel: logLevel.WARN, retry: { retries: 10 } });
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  await txn(producer, values('c1'), 'commit');
  await txn(producer, values('ab'), 'abort');
  await txn(producer, values('c2'), 'commit');
  await txn(producer, values('c3'), 'commit',
    { consumerGroupId: groupId, topics: [{ topic, partitions: [{ partition: 0, offset }] }] });
  await txn(producer, ['done', 'done'], 'commit');
  await producer.disconnect();
  console.log(JSON.stringify({ ok: true }));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
