'use strict'
// librdkafka 2.12 (node-rdkafka) against a real Holdfast broker, run by
// cmd/holdfast/rdkafka_test.go:
//
//   node check.js group '{"brokers":"h:p,...","topic":"t","group":"g","records":N,"members":["consumer","classic"]}'
//
// Each member is a KafkaConsumer with that group.protocol (KIP-848's
// "consumer", or "classic" with cooperative-sticky); they start one after
// the other and read until every value 0..N-1 has been read by one of them,
// committing what they read after each batch, then leave. It prints ONE
// JSON object on stdout (what each member read, the partitions it held);
// the Go test judges it. librdkafka's log goes to stderr.

const Kafka = require('node-rdkafka')

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

function member(o, i, protocol) {
  const conf = {
    'bootstrap.servers': o.brokers,
    'client.id': `rdkafka-${i}-${protocol}`,
    'group.id': o.group,
    'group.protocol': protocol,
    'enable.auto.commit': false,
    'enable.partition.eof': false,
    'topic.metadata.refresh.interval.ms': 1000,
    'log_level': 4,
    'event_cb': true,
    ...(process.env.RDKAFKA_DEBUG ? { debug: process.env.RDKAFKA_DEBUG } : {}),
  }
  if (protocol === 'classic') {
    conf['partition.assignment.strategy'] = 'cooperative-sticky'
    conf['session.timeout.ms'] = 10000
    conf['heartbeat.interval.ms'] = 500
    conf['rebalance_cb'] = true // incremental assign and unassign
  }
  const c = new Kafka.KafkaConsumer(conf, { 'auto.offset.reset': 'earliest' })
  c.on('event.log', l => process.stderr.write(`rdkafka ${i} ${l.severity} ${l.fac} ${l.message}\n`))
  c.on('event.error', e => process.stderr.write(`rdkafka ${i} error ${e}\n`))
  c.setDefaultConsumeTimeout(200)
  return c
}

const connect = c => new Promise((resolve, reject) => c.connect({ timeout: 20000 }, err => (err ? reject(err) : resolve())))
// Few records a batch, and a pause after each, until every member holds
// partitions (a KIP-848 member gives partitions up at its next heartbeat,
// every group.consumer.heartbeat.interval.ms, 5s by default); then as fast
// as they come.
const consume = (c, n) => new Promise((resolve, reject) => c.consume(n, (err, ms) => (err ? reject(err) : resolve(ms))))
const disconnect = c => new Promise(resolve => c.disconnect(() => resolve()))

async function group(o) {
  const out = { Members: [], TimedOut: false, Errors: [], StaleCommits: 0 }
  let stale = 0
  const seen = new Set()
  const deadline = Date.now() + (o.timeoutMs || 90000)
  const done = () => seen.size >= o.records || Date.now() > deadline

  const run = async (i, protocol) => {
    const m = { Protocol: protocol, Values: [], MaxPartitions: 0, Partitions: [] }
    out.Members.push(m)
    const c = member(o, i, protocol)
    // What it read and has not committed yet. A commit that races a
    // change of the member's epoch (a heartbeat gave it partitions back
    // after it had read them at an older epoch) is refused with
    // STALE_MEMBER_EPOCH, and librdkafka hands that to the application
    // (it sends the next heartbeat at once): an application commits again
    // once it has the new epoch, as Kafka's Java consumer does by itself.
    const pending = new Map()
    const commitPending = () => {
      if (pending.size === 0) {
        return true
      }
      try {
        c.commitSync([...pending].map(([partition, offset]) => ({ topic: o.topic, partition, offset })))
      } catch (e) {
        if (e && e.code === Kafka.CODES.ERRORS.ERR_STALE_MEMBER_EPOCH) {
          stale++
          return false
        }
        throw e
      }
      pending.clear()
      return true
    }
    await connect(c)
    c.subscribe([o.topic])
    // Each member reads a few records alone before the next joins, so the
    // later ones join a group that is consuming.
    const nextDue = () => i + 1 < o.members.length && started[i + 1] === false && seen.size >= 20 * (i + 1)
    const settled = () => started.every(s => s) && out.Members.every(x => x.MaxPartitions > 0)
    try {
      while (!done()) {
        const calm = settled()
        const ms = await consume(c, calm ? 100 : 3)
        for (const msg of ms) {
          const v = Number(msg.value.toString())
          m.Values.push(v)
          seen.add(v)
          pending.set(msg.partition, Math.max(pending.get(msg.partition) || 0, msg.offset + 1))
        }
        commitPending()
        const held = c.assignments().map(tp => tp.partition)
        m.MaxPartitions = Math.max(m.MaxPartitions, held.length)
        if (held.length > 0) {
          m.Partitions = held.sort((a, b) => a - b)
        }
        if (!calm) {
          await sleep(100)
        }
        if (nextDue()) {
          started[i + 1] = true
          runs.push(run(i + 1, o.members[i + 1]))
        }
      }
      for (const until = Date.now() + 30000; !commitPending(); ) {
        if (Date.now() > until) {
          throw new Error(`still STALE_MEMBER_EPOCH committing ${JSON.stringify([...pending])} after 30 s`)
        }
        await sleep(200)
      }
    } catch (e) {
      out.Errors.push(`member ${i}: ${e && e.message ? e.message : e}`)
    } finally {
      await disconnect(c)
    }
  }
  const started = o.members.map((_, i) => i === 0)
  const runs = [run(0, o.members[0])]
  // Wait for every member, the ones started on the way included.
  for (let n = 0; n < runs.length; n++) {
    await runs[n]
  }
  out.TimedOut = seen.size < o.records
  out.StaleCommits = stale
  return out
}

async function main() {
  const [scenario, raw] = process.argv.slice(2)
  const o = JSON.parse(raw)
  let out
  switch (scenario) {
    case 'group':
      out = await group(o)
      break
    default:
      throw new Error(`unknown scenario ${scenario}`)
  }
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().then(
  () => process.exit(0),
  e => {
    process.stderr.write(`check.js: ${e && e.stack ? e.stack : e}\n`)
    process.exit(1)
  }
)
