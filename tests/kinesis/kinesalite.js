// Starts kinesalite (in memory) on --port; see loopback.js for the bind address.
'use strict'
require('./loopback')
const argv = require('minimist')(process.argv.slice(2))
const server = require('kinesalite')(argv).listen(Number(argv.port), () => {
  const { address, port } = server.address()
  console.log(`Listening at http://${address}:${port}`)
})
