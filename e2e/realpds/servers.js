// Starts the reference did:plc directory (in memory) and the reference atproto
// PDS on loopback, for the realpds end-to-end test (realpds_test.go starts
// this script; run.sh installs its packages).
//
// Environment:
//   REALPDS_PLC_PORT, REALPDS_PDS_PORT  ports to listen on (required)
//   REALPDS_DATA_DIR                    an empty directory for the PDS (required)
//
// Prints one line "READY <plc url> <pds url>" on stdout when both serve.
// Stops on SIGTERM or SIGINT, and, with REALPDS_EXIT_ON_STDIN_EOF=1, when
// stdin closes (the test process is gone); exits non-zero if either server
// fails to start.
'use strict'

const crypto = require('node:crypto')
const dns = require('node:dns')
const fs = require('node:fs')
const net = require('node:net')
const path = require('node:path')

// Both servers call listen(port), which binds every interface. Bind them to
// 127.0.0.1 only: nothing outside this machine should reach a test PDS.
const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) {
    if (typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1')
  } else if (args[0] && typeof args[0] === 'object' && args[0].port !== undefined && !args[0].host) {
    args[0] = { ...args[0], host: '127.0.0.1' }
  }
  return listen.apply(this, args)
}
// The PDS reaches the PLC, and publishes itself, as http://localhost:PORT;
// with only 127.0.0.1 bound, localhost must not resolve to ::1 first.
dns.setDefaultResultOrder('ipv4first')

function required(name) {
  const v = process.env[name]
  if (!v) {
    console.error(`servers.js: ${name} is not set`)
    process.exit(2)
  }
  return v
}

const plcPort = Number(required('REALPDS_PLC_PORT'))
const pdsPort = Number(required('REALPDS_PDS_PORT'))
const dataDir = required('REALPDS_DATA_DIR')

let plcServer
let pds
let stopping = false

async function stop(code) {
  if (stopping) return
  stopping = true
  // Never hang on shutdown: the test waits for the exit.
  setTimeout(() => process.exit(code), 5000).unref()
  try {
    if (pds) await pds.destroy()
  } catch (err) {
    console.error('servers.js: stopping pds:', err)
  }
  try {
    if (plcServer) await plcServer.destroy()
  } catch (err) {
    console.error('servers.js: stopping plc:', err)
  }
  process.exit(code)
}

async function main() {
  const plc = require('@did-plc/server')
  plcServer = plc.PlcServer.create({ db: plc.Database.mock(), port: plcPort })
  await plcServer.start()
  console.error(`servers.js: plc listening on 127.0.0.1:${plcPort}`)

  const pdsDir = path.join(dataDir, 'pds')
  fs.mkdirSync(path.join(pdsDir, 'blobs'), { recursive: true })
  Object.assign(process.env, {
    PDS_HOSTNAME: 'localhost', // public URL http://localhost:PORT
    PDS_PORT: String(pdsPort),
    PDS_DEV_MODE: 'true',
    PDS_DATA_DIRECTORY: pdsDir,
    PDS_BLOBSTORE_DISK_LOCATION: path.join(pdsDir, 'blobs'),
    PDS_DID_PLC_URL: `http://localhost:${plcPort}`,
    PDS_JWT_SECRET: crypto.randomBytes(16).toString('hex'),
    PDS_ADMIN_PASSWORD: crypto.randomBytes(16).toString('hex'),
    PDS_PLC_ROTATION_KEY_K256_PRIVATE_KEY_HEX: crypto.randomBytes(32).toString('hex'),
    PDS_INVITE_REQUIRED: 'false',
    PDS_SERVICE_HANDLE_DOMAINS: '.test',
    PDS_DISABLE_SSRF_PROTECTION: 'true',
    PDS_RATE_LIMITS_ENABLED: 'false',
    // Nothing outside loopback: no appview, no moderation service, no relay.
    PDS_BSKY_APP_VIEW_URL: 'http://appview.invalid',
    PDS_BSKY_APP_VIEW_DID: 'did:example:appview',
    PDS_MOD_SERVICE_URL: 'http://mod.invalid',
    PDS_MOD_SERVICE_DID: 'did:example:mod',
    PDS_CRAWLERS: '',
    LOG_ENABLED: process.env.LOG_ENABLED || 'false',
  })
  const { PDS, envToCfg, envToSecrets, readEnv } = require('@atproto/pds')
  const env = readEnv()
  pds = await PDS.create(envToCfg(env), envToSecrets(env))
  await pds.start()
  console.error(`servers.js: pds listening on 127.0.0.1:${pdsPort}`)

  console.log(`READY http://localhost:${plcPort} http://localhost:${pdsPort}`)
}

process.on('SIGTERM', () => stop(0))
process.on('SIGINT', () => stop(0))
if (process.env.REALPDS_EXIT_ON_STDIN_EOF === '1') {
  process.stdin.resume()
  process.stdin.on('end', () => stop(0))
  process.stdin.on('error', () => stop(0))
}

main().catch((err) => {
  console.error('servers.js: failed to start:', err)
  stop(1)
})
