// A kafkajs consumer-group member for the end-to-end tests: joins GROUP on TOPIC from
// the earliest offset, consumes until it has seen COUNT records, commits (kafkajs
// commits resolved offsets on each batch), leaves the group and prints one JSON line:
// {"consumed": n, "keys": [...]}. Exits 1 on any error or after TIMEOUT_MS.
const { Kafka, logLevel } = require('kafkajs');

const brokers = process.env.BROKERS.split(',');
const topic = process.env.TOPIC;
const groupId = process.env.GROUP;
const count = parseInt(process.env.COUNT, 10);
const timeoutMs = parseInt(process.env.TIMEOUT_MS || '60000', 10);

async function main() {
  const kafka = new Kafka({ clientId: 'kafkajs-e2e', brokers, logLevel: logLevel.WARN, retry: { retries: 10 } });
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 });
  const keys = [];
  const timer = setTimeout(() => {
    console.error(`timed out after ${timeoutMs} ms with ${keys.length}/${count} records`);
    process.exit(1);
  }, timeoutMs);
  consumer.on(consumer.events.CRASH, (e) => {
    console.error(`consumer crashed: ${e.payload.error}`);
    process.exit(1);
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let resolveDone;
  const done = new Promise((r) => { resolveDone = r; });
  await consumer.run({
    autoCommitInterval: 500,
    eachMessage: async ({ message }) => {
      keys.push(message.key.toString());
      if (keys.length >= count) resolveDone();
    },
  });
  await done;
  // Commit what was consumed before leaving (kafkajs also commits on disconnect).
  await consumer.commitOffsets([]);
  await consumer.disconnect();
  clearTimeout(timer);
  console.log(JSON.stringify({ consumed: keys.length, keys }));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
