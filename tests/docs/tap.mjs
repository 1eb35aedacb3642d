// SPDX-License-Identifier: MIT
//
// TAP for the tree checks in tests/docs: ok() prints one case (and the
// lines of why under a failure), done() the plan and the exit code.
let n = 0;
let failed = 0;

export function ok(cond, what, why) {
  n++;
  if (cond) console.log(`ok ${n} - ${what}`);
  else {
    failed++;
    console.log(`not ok ${n} - ${what}`);
    for (const line of [].concat(why || [])) console.log(`# ${line}`);
  }
}

export function done() {
  console.log(`1..${n}`);
  process.exitCode = failed ? 1 : 0;
}
