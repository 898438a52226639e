'use strict'
// kafkajs against a real Holdfast broker, run by cmd/holdfast/kafkajs_test.go:
//
//   node check.js plain  '{"brokers":[...],"replicationFactor":1}'
//   node check.js secure '{"sasl":"127.0.0.1:P","ssl":"127.0.0.1:Q","certs":"DIR",...}'
//
// It does what an application does and prints ONE JSON object on stdout
// with what kafkajs saw (offsets, values, watermarks, errors); the Go test
// judges it. kafkajs's own log goes to stderr.

const fs = require('fs')
const path = require('path')
const {
  Kafka,
  logLevel,
  AclResourceTypes,
  AclOperationTypes,
  AclPermissionTypes,
  ResourcePatternTypes,
} = require('kafkajs')

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// Kafka error names by kafkajs's message for them.
const errorTypes = new Map(require('kafkajs/src/protocol/error').errorCodes.map(e => [e.message, e.type]))

// answered collects, by client id, the Kafka errors brokers answered
// requests with, as kafkajs logs them ("Response GroupCoordinator(...)"):
// some kafkajs errors do not keep the broker's error as their cause.
const answered = {}

const stderrLog = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log
  if (namespace === 'Connection' && message.startsWith('Response ') && extra.clientId) {
    const type = errorTypes.get(extra.error) || extra.error
    ;(answered[extra.clientId] = answered[extra.clientId] || []).push(`${message.split('(')[0].slice('Response '.length)} ${type}`)
  }
  process.stderr.write(`kafkajs ${label} [${namespace}] ${message} ${JSON.stringify(extra)}\n`)
}

// client: conn is {brokers, ca, cert, key, sasl}; ca/cert/key are file paths.
function client(id, conn) {
  let ssl
  if (conn.ca) {
    ssl = { ca: [fs.readFileSync(conn.ca)] }
    if (conn.cert) {
      ssl.cert = fs.readFileSync(conn.cert)
      ssl.key = fs.readFileSync(conn.key)
    }
  }
  return new Kafka({
    clientId: id,
    brokers: conn.brokers,
    ssl,
    sasl: conn.sasl,
    logLevel: logLevel.WARN,
    logCreator: stderrLog,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: conn.retries === undefined ? 8 : conn.retries, initialRetryTime: 200, maxRetryTime: 2000 },
  })
}

// errInfo flattens a kafkajs error: its name, the protocol error type
// (Kafka's error name) and those of its causes and aggregated errors.
function errInfo(e) {
  const out = []
  const walk = (x, depth) => {
    if (!x || depth > 4) return
    out.push({ name: x.name, type: x.type || '', message: String(x.message) })
    walk(x.cause || x.originalError, depth + 1)
    for (const y of x.errors || []) walk(y, depth + 1)
  }
  walk(e, 0)
  return out
}

// refused runs fn, which must fail, and returns what kafkajs threw (or
// null if it did not).
async function refused(fn) {
  try {
    await fn()
    return null
  } catch (e) {
    return errInfo(e)
  }
}

// produce sends each batch as one send() and returns the base offset
// kafkajs was told for each (partition, batch).
async function produce(producer, topic, batches) {
  const acked = []
  for (const messages of batches) {
    const res = await producer.send({ topic, acks: -1, messages })
    for (const r of res) acked.push({ partition: r.partition, baseOffset: r.baseOffset, errorCode: r.errorCode })
  }
  return acked
}

// consume reads with a consumer group until it has want records, then
// keeps reading for quietMs more: anything beyond want is a phantom the
// Go test reports. Offsets are committed (kafkajs autocommit) on the way
// and at disconnect.
async function consume(kafka, groupId, topic, want, extra = {}) {
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: 10000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 200,
    retry: { retries: 8, initialRetryTime: 200, maxRetryTime: 2000 },
    ...extra,
  })
  const got = []
  let done
  const enough = new Promise(resolve => (done = resolve))
  let crash = null
  consumer.on(consumer.events.CRASH, ev => {
    crash = errInfo(ev.payload.error)
    done()
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      got.push({
        partition,
        offset: message.offset,
        key: message.key ? message.key.toString() : null,
        value: message.value ? message.value.toString() : null,
      })
      if (got.length >= want) done()
    },
  })
  const timedOut = await Promise.race([enough.then(() => false), sleep(extra.timeoutMs || 40000).then(() => true)])
  if (!timedOut && !crash) await sleep(1500)
  await consumer.disconnect()
  return { records: got, timedOut, crash }
}

async function watermarks(admin, topic) {
  const offs = await admin.fetchTopicOffsets(topic)
  return offs.map(o => ({ partition: o.partition, low: o.low, high: o.high })).sort((a, b) => a.partition - b.partition)
}

async function committed(admin, groupId, topic) {
  const res = await admin.fetchOffsets({ groupId, topics: [topic] })
  return res[0].partitions.map(p => ({ partition: p.partition, offset: p.offset })).sort((a, b) => a.partition - b.partition)
}

// plain: a topic made with the admin client, idempotent produce with keys,
// a group reading from the beginning and committing, the same group
// resuming after more writes, and transactions (one aborted) read
// committed and uncommitted.
async function plain(o) {
  const out = { version: require('kafkajs/package.json').version }
  const kafka = client('holdfast-kafkajs', { brokers: o.brokers })
  const admin = kafka.admin()
  await admin.connect()
  out.cluster = await admin.describeCluster()
  const topic = 'js-orders'
  const partitions = 3
  const spec = { topics: [{ topic, numPartitions: partitions, replicationFactor: o.replicationFactor }], waitForLeaders: true, timeout: 20000 }
  out.created = await admin.createTopics(spec)
  out.createdAgain = await admin.createTopics(spec) // false: it exists
  out.topics = (await admin.listTopics()).filter(t => !t.startsWith('__')).sort()
  out.metadata = (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions
    .map(p => ({ partition: p.partitionId, leader: p.leader, replicas: p.replicas.length, isr: p.isr.length }))
    .sort((a, b) => a.partition - b.partition)
  out.emptyWatermarks = await watermarks(admin, topic)

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  // 30 records, 10 per partition, in 3 sends; keys say where they went.
  const batch = from => Array.from({ length: 10 }, (_, i) => {
    const n = from + i
    return { partition: n % partitions, key: `k${n}`, value: `v${n}` }
  })
  out.acked = await produce(producer, topic, [batch(0), batch(10), batch(20)])
  out.watermarks = await watermarks(admin, topic)
  out.first = await consume(kafka, 'js-group', topic, 30)
  out.committed = await committed(admin, 'js-group', topic)

  // More writes; the group resumes where it committed.
  out.ackedMore = await produce(producer, topic, [batch(30)])
  out.second = await consume(kafka, 'js-group', topic, 10)
  out.committedAfter = await committed(admin, 'js-group', topic)
  await producer.disconnect()

  // Transactions: commit 3, abort 2, commit 1.
  const txTopic = 'js-txn'
  await admin.createTopics({ topics: [{ topic: txTopic, numPartitions: 1, replicationFactor: o.replicationFactor }], waitForLeaders: true, timeout: 20000 })
  const tp = kafka.producer({ transactionalId: 'js-txn-producer', idempotent: true, maxInFlightRequests: 1 })
  await tp.connect()
  for (const [values, commit] of [[['t0', 't1', 't2'], true], [['a0', 'a1'], false], [['t3'], true]]) {
    const txn = await tp.transaction()
    await txn.send({ topic: txTopic, messages: values.map(value => ({ value })) })
    if (commit) await txn.commit()
    else await txn.abort()
  }
  await tp.disconnect()
  out.txnWatermarks = await watermarks(admin, txTopic)
  out.readCommitted = await consume(kafka, 'js-rc', txTopic, 4)
  out.readUncommitted = await consume(kafka, 'js-ru', txTopic, 6, { readUncommitted: true })
  await admin.disconnect()
  return out
}

// secure: SCRAM-SHA-512 and PLAIN over SASL_SSL, SSL with a client
// certificate; ACLs made and listed with kafkajs's admin client as the
// super user; what must be refused is.
async function secure(o) {
  const out = { version: require('kafkajs/package.json').version }
  const certs = f => path.join(o.certs, f)
  const ca = certs('ca.pem')
  const scram = (username, password, retries) => ({ brokers: [o.sasl], ca, sasl: { mechanism: 'scram-sha-512', username, password }, retries })
  const plainSasl = (username, password, retries) => ({ brokers: [o.sasl], ca, sasl: { mechanism: 'plain', username, password }, retries })
  const tlsCert = (name, retries) => ({ brokers: [o.ssl], ca, cert: name && certs(name + '.crt'), key: name && certs(name + '.key'), retries })

  const admin = client('js-admin', scram('admin', 'admin-secret')).admin()
  await admin.connect()
  const topic = 'js-orders'
  out.created = await admin.createTopics({ topics: [{ topic, numPartitions: 2 }, { topic: 'js-secret', numPartitions: 1 }], waitForLeaders: true })
  const acl = (principal, resourceType, resourceName, operation) => ({
    resourceType, resourceName, resourcePatternType: ResourcePatternTypes.LITERAL,
    principal, host: '*', operation, permissionType: AclPermissionTypes.ALLOW,
  })
  const T = AclResourceTypes.TOPIC
  const G = AclResourceTypes.GROUP
  const R = AclOperationTypes.READ
  const W = AclOperationTypes.WRITE
  await admin.createAcls({
    acl: [
      acl('User:bob', T, topic, R), acl('User:bob', T, topic, W), acl('User:bob', G, 'js-bob', R),
      acl('User:carol', T, topic, W),
      acl('User:alice', T, topic, R), acl('User:alice', G, 'js-alice', R),
    ],
  })
  const described = await admin.describeAcls({
    resourceType: AclResourceTypes.ANY, resourcePatternType: ResourcePatternTypes.ANY,
    operation: AclOperationTypes.ANY, permissionType: AclPermissionTypes.ANY,
  })
  const typeName = (m, v) => Object.keys(m).find(k => m[k] === v)
  out.acls = []
  for (const r of described.resources) {
    for (const a of r.acls) {
      out.acls.push(`${a.principal} ${typeName(AclPermissionTypes, a.permissionType)} ${typeName(AclOperationTypes, a.operation)} ${typeName(AclResourceTypes, r.resourceType)}:${r.resourceName}`)
    }
  }
  out.acls.sort()

  // bob (SCRAM-SHA-512), carol (PLAIN, a JAAS user) and bob again over
  // PLAIN with his SCRAM password each write to js-orders.
  const writers = [['bob-scram', scram('bob', 'bob-secret'), 3], ['carol-plain', plainSasl('carol', 'carol-secret'), 2], ['bob-plain', plainSasl('bob', 'bob-secret'), 1]]
  out.acked = {}
  let n = 0
  for (const [who, conn, count] of writers) {
    const p = client(who, conn).producer()
    await p.connect()
    const messages = Array.from({ length: count }, () => ({ partition: 0, key: who, value: `m${n++}` }))
    out.acked[who] = await produce(p, topic, [messages])
    await p.disconnect()
  }
  // bob reads them with his group (SASL_SSL), alice with hers (SSL).
  out.bobConsumed = await consume(client('bob-read', scram('bob', 'bob-secret')), 'js-bob', topic, 6)
  out.aliceConsumed = await consume(client('alice-read', tlsCert('alice')), 'js-alice', topic, 6)
  out.watermarks = await watermarks(admin, topic)

  // Refusals (no retries: each is answered at once).
  const connectAdmin = async conn => {
    const a = client('js-refused', conn).admin()
    try {
      await a.connect()
      await a.listTopics()
    } finally {
      await a.disconnect()
    }
  }
  const send = async (conn, t) => {
    const p = client('js-refused', conn).producer()
    try {
      await p.connect()
      await p.send({ topic: t, messages: [{ value: 'nope' }] })
    } finally {
      await p.disconnect()
    }
  }
  out.refused = {
    scramWrongPassword: await refused(() => connectAdmin(scram('bob', 'wrong', 0))),
    plainWrongPassword: await refused(() => connectAdmin(plainSasl('carol', 'wrong', 0))),
    unknownUser: await refused(() => connectAdmin(scram('mallory', 'bob-secret', 0))),
    noClientCert: await refused(() => connectAdmin(tlsCert(null, 0))),
    bobWritesSecret: await refused(() => send(scram('bob', 'bob-secret', 0), 'js-secret')),
    aliceWritesOrders: await refused(() => send(tlsCert('alice', 0), topic)),
    carolJoinsGroup: null,
    bobCreatesTopic: await refused(async () => {
      const a = client('js-refused', scram('bob', 'bob-secret', 0)).admin()
      await a.connect()
      try {
        await a.createTopics({ topics: [{ topic: 'js-bobs-own' }] })
      } finally {
        await a.disconnect()
      }
    }),
  }
  // carol may write js-orders, not join a group (no READ on it).
  const carol = await consume(client('carol-read', plainSasl('carol', 'carol-secret', 0)), 'js-carol', topic, 1, { timeoutMs: 15000 })
  // kafkajs reports that as KafkaJSGroupCoordinatorNotFound: the broker's
  // answer is in what it logged.
  out.refused.carolJoinsGroup = carol.crash
  out.carolAnswered = answered['carol-read'] || []
  out.carolRecords = carol.records.length
  // All of that left js-orders as it was.
  out.watermarksAfter = await watermarks(admin, topic)
  out.secretWatermarks = await watermarks(admin, 'js-secret')
  await admin.disconnect()
  return out
}

const scenarios = { plain, secure }

async function main() {
  const [name, opts] = process.argv.slice(2)
  if (!scenarios[name]) {
    process.stderr.write(`usage: node check.js plain|secure '<json options>'\n`)
    process.exit(2)
  }
  const out = await scenarios[name](JSON.parse(opts))
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().then(
  () => process.exit(0),
  e => {
    process.stderr.write(`check.js: ${e && e.stack}\n${JSON.stringify(errInfo(e))}\n`)
    process.exit(1)
  }
)
