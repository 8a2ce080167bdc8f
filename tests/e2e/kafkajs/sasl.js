// kafkajs over SASL_SSL for the end-to-end tests: with SCRAM (MECHANISM, USERNAME,
// PASSWORD) and the CA in CA_FILE, produces COUNT records to TOPIC, consumes them back
// as group GROUP, then tries once with PASSWORD + "-wrong". Prints one JSON line:
// {"consumed": [values], "wrongPassword": "<error name>"}. Exits 1 on any other error
// or after TIMEOUT_MS.
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

const brokers = process.env.BROKERS.split(',');
const topic = process.env.TOPIC;
const count = parseInt(process.env.COUNT, 10);
const timeoutMs = parseInt(process.env.TIMEOUT_MS || '60000', 10);
const ssl = { ca: [fs.readFileSync(process.env.CA_FILE, 'utf-8')] };
const mechanism = process.env.MECHANISM;

function client(password) {
  return new Kafka({
    clientId: 'kafkajs-sasl-e2e', brokers, ssl, logLevel: logLevel.NOTHING,
    sasl: { mechanism, username: process.env.USERNAME, password },
    retry: { retries: 3 },
  });
}

async function main() {
  const timer = setTimeout(() => {
    console.error(`timed out after ${timeoutMs} ms`);
    process.exit(1);
  }, timeoutMs);
  const kafka = client(process.env.PASSWORD);
  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let i = 0; i < count; i++) messages.push({ value: `kafkajs-${i}` });
  await producer.send({ topic, messages, acks: -1 });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: process.env.GROUP, sessionTimeout: 10000, heartbeatInterval: 1000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const consumed = [];
  let resolveDone;
  const done = new Promise((r) => { resolveDone = r; });
  await consumer.run({
    eachMessage: async ({ message }) => {
      consumed.push(message.value.toString());
      if (consumed.length >= count) resolveDone();
    },
  });
  await done;
  await consumer.disconnect();

  let wrongPassword = 'none';
  const bad = client(process.env.PASSWORD + '-wrong').admin();
  try {
    await bad.connect();
    await bad.listTopics();
  } catch (e) {
    wrongPassword = e.name + ': ' + e.message;
  }
  await bad.disconnect().catch(() => {});
  clearTimeout(timer);
  console.log(JSON.stringify({ consumed, wrongPassword }));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
