// rlf.js drives rate-limiter-flexible's RateLimiterPostgres: N consumes of
// one point by CALLERS concurrent callers over KEYS keys (1: one hot key),
// against the PostgreSQL at URL, on a limit no caller reaches. It prints
// the seconds the N took, after a warm-up that creates the table.
//
//   node rlf.js URL CALLERS N KEYS
const { Pool } = require('pg');
const { RateLimiterPostgres } = require('rate-limiter-flexible');

const [url, callers, n, keys] = process.argv.slice(2);
const pool = new Pool({ connectionString: url });

function ready() {
  return new Promise((resolve, reject) => {
    const rl = new RateLimiterPostgres({
      storeClient: pool, tableName: 'rlf', points: 1e12, duration: 3600, clearExpiredByTimeout: false,
    }, (err) => (err ? reject(err) : resolve(rl)));
  });
}

async function main() {
  const rl = await ready();
  const total = Number(n);
  const nkeys = Number(keys);
  let next = 0;
  const run = async () => {
    for (;;) {
      const i = next++;
      if (i >= total) return;
      await rl.consume('k' + (i % nkeys), 1);
    }
  };
  await rl.consume('warm', 1);
  const start = process.hrtime.bigint();
  await Promise.all(Array.from({ length: Number(callers) }, run));
  const took = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(took.toFixed(6));
  await pool.end();
}

main().catch((err) => { console.error(err); process.exit(1); });
