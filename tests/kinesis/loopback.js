// Preloaded with `node --require` in front of an emulator: forces every server it
// opens onto 127.0.0.1, since kinesis-local hard-codes 0.0.0.0 and kinesalite
// listens on all interfaces. Test servers must never be reachable from outside.
'use strict'
const net = require('net')
const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (...args) {
  if (args.length > 0 && typeof args[0] === 'object' && args[0] !== null) {
    args[0] = { ...args[0], host: '127.0.0.1' }
  } else if (typeof args[0] === 'number' || typeof args[0] === 'string') {
    const rest = args.slice(1).filter((a) => typeof a === 'function')
    args = [args[0], '127.0.0.1', ...rest]
  }
  return listen.apply(this, args)
}
