// Drives the official JS library (npm "ecommpay") for the Python tests: one JSON request per
// line on stdin, one JSON answer per line on stdout, so one node process serves a whole run.
'use strict';

const readline = require('readline');
const { Payment, Callback, signer } = require('ecommpay');
const converter = require('ecommpay/src/converter');

const operations = {
  // The signature the library computes for a payload.
  sign: ({ payload, secret }) => signer(payload, secret),
  // The string the library signs (for diagnostics).
  string: ({ payload }) => converter(payload, ['frame_mode']),
  // A Payment Page URL built by the library.
  url: ({ projectId, secret, params, baseUrl }) => new Payment(projectId, secret, params, baseUrl).getUrl(),
  // Whether the library accepts a signed callback body.
  callback: ({ body, secret }) => {
    try {
      return { valid: true, paymentId: new Callback(secret, body).getPaymentId() };
    } catch (error) {
      return { valid: false, message: String(error.message) };
    }
  },
};

const lines = readline.createInterface({ input: process.stdin });
lines.on('line', (line) => {
  let answer;
  try {
    const request = JSON.parse(line);
    answer = { result: operations[request.op](request) };
  } catch (error) {
    answer = { error: String(error && error.stack ? error.stack : error) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
});
