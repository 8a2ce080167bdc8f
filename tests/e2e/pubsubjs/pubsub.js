// The Node Pub/Sub client (@google-cloud/pubsub) for the end-to-end tests, pointed at the
// gateway by PUBSUB_EMULATOR_HOST: creates TOPIC and SUBSCRIPTION, publishes COUNT
// messages with attributes, receives every one through StreamingPull (acking each),
// closes, and prints one JSON line: {"published": n, "received": n, "bad": [...]}.
// Exits 1 on any error or after TIMEOUT_MS.
const { PubSub } = require('@google-cloud/pubsub');

const topicId = process.env.TOPIC;
const subId = process.env.SUBSCRIPTION;
const count = parseInt(process.env.COUNT, 10);
const timeoutMs = parseInt(process.env.TIMEOUT_MS || '60000', 10);

async function main() {
  const timer = setTimeout(() => {
    console.error(`timed out after ${timeoutMs} ms`);
    process.exit(1);
  }, timeoutMs);
  const pubsub = new PubSub({ projectId: process.env.PROJECT });
  const [topic] = await pubsub.createTopic(topicId);
  const [sub] = await topic.createSubscription(subId, { ackDeadlineSeconds: 30 });

  const ids = new Map();
  const pending = [];
  for (let i = 0; i < count; i++) {
    pending.push(topic.publishMessage({ data: Buffer.from(`m${i}`), attributes: { i: String(i), lang: 'node' } })
      .then((id) => ids.set(id, i)));
  }
  await Promise.all(pending);

  const seen = new Set();
  const bad = [];
  await new Promise((resolve, reject) => {
    sub.on('error', reject);
    sub.on('message', (m) => {
      m.ack();
      const i = parseInt(m.attributes.i, 10);
      if (m.data.toString() !== `m${i}` || m.attributes.lang !== 'node' || Object.keys(m.attributes).length !== 2 || ids.get(m.id) !== i) {
        bad.push(`${m.id} ${m.data} ${JSON.stringify(m.attributes)}`);
      }
      seen.add(i);
      if (seen.size === count) resolve();
    });
  });
  await sub.close(); // flushes the acks
  clearTimeout(timer);
  console.log(JSON.stringify({ published: ids.size, received: seen.size, bad: bad.slice(0, 5) }));
  await pubsub.close();
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
