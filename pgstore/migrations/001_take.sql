-- Migration 1: the state tables and the take function, in the store's
-- schema ({{schema}}, replaced when the migration is applied).
--
-- The functions are line-by-line twins of package algorithm (and of
-- redisstore's Lua scripts): integer microseconds in bigint, products
-- through muldiv, which goes to numeric where a product could pass 2^63.
-- Algorithm codes are sluice.Algorithm's: 1 fixed_window, 2 sliding_log,
-- 3 sliding_window, 4 token_bucket, 5 leaky_bucket, 6 gcra, 7 calendar.

-- A state: key and kind (algorithm, period in µs and zone, as
-- "gcra:1000000" or "calendar:2678400000000:Europe/Berlin"); a, b and c
-- are algorithm.State's words, log a sliding log's entries as pairs
-- (time, cost), oldest first. expires is when the state is back to full
-- (µs on the database's clock, plus a second): a row past it reads as a
-- key never seen, and the sweep deletes it.
CREATE TABLE {{schema}}.quota (
  key bytea NOT NULL,
  kind text NOT NULL,
  a bigint NOT NULL DEFAULT 0,
  b bigint NOT NULL DEFAULT 0,
  c bigint NOT NULL DEFAULT 0,
  log bigint[],
  expires bigint NOT NULL,
  PRIMARY KEY (key, kind)
) WITH (fillfactor = 70);

-- Short rate limits: written at every check, worth no WAL. A crash (not a
-- clean restart) empties it, as a Redis without persistence loses its keys.
CREATE UNLOGGED TABLE {{schema}}.state (LIKE {{schema}}.quota INCLUDING ALL);
ALTER TABLE {{schema}}.state SET (fillfactor = 70);

-- Idempotency IDs (sluice.Request.ID) applied in the last minute.
CREATE UNLOGGED TABLE {{schema}}.calls (
  key bytea NOT NULL,
  id bytea NOT NULL,
  expires bigint NOT NULL,
  PRIMARY KEY (key, id)
);

-- clock returns the database's clock in µs.
CREATE FUNCTION {{schema}}.clock() RETURNS bigint LANGUAGE sql VOLATILE AS
$$ SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint $$;

-- muldiv returns floor(a*b/c) and (a*b) mod c for a, b >= 0 and c > 0 (Go:
-- mulDiv), saturating a quotient past 2^63 - 1 with remainder 0.
CREATE FUNCTION {{schema}}.muldiv(a bigint, b bigint, c bigint, OUT q bigint, OUT r bigint)
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE x numeric; y numeric;
BEGIN
  IF a < 3037000499 AND b < 3037000499 THEN -- a*b < 2^63
    q := (a * b) / c;
    r := (a * b) % c;
    RETURN;
  END IF;
  x := a::numeric * b;
  y := div(x, c);
  IF y > 9223372036854775807 THEN
    q := 9223372036854775807; r := 0;
  ELSE
    q := y; r := mod(x, c);
  END IF;
END $$;

-- mdq and mdr are muldiv's quotient and remainder as SQL functions, which
-- PL/pgSQL evaluates inline: the algorithms call them.
CREATE FUNCTION {{schema}}.mdq(a bigint, b bigint, c bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS
$$ SELECT CASE WHEN a < 3037000499 AND b < 3037000499 THEN (a * b) / c
  ELSE least(div(a::numeric * b, c), 9223372036854775807)::bigint END $$;

CREATE FUNCTION {{schema}}.mdr(a bigint, b bigint, c bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS
$$ SELECT CASE WHEN a < 3037000499 AND b < 3037000499 THEN (a * b) % c
  WHEN div(a::numeric * b, c) > 9223372036854775807 THEN 0
  ELSE mod(a::numeric * b, c)::bigint END $$;

-- floorwin returns the start of the epoch-aligned window of length p
-- holding t (Go: floorWindow).
CREATE FUNCTION {{schema}}.floorwin(t bigint, p bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS
$$ SELECT t - t % p - CASE WHEN t < 0 AND t % p <> 0 THEN p ELSE 0 END $$;

-- ceildiv returns ceil(a/b) for b > 0 (Go: ceilDiv).
CREATE FUNCTION {{schema}}.ceildiv(a bigint, b bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS
$$ SELECT a / b + CASE WHEN a > 0 AND a % b <> 0 THEN 1 ELSE 0 END $$;

-- tat_at is algorithm.tatAt: max(TAT, now) at the limit's rate, a TAT
-- kept at another rate (c) converted to the same used capacity.
CREATE FUNCTION {{schema}}.tat_at(a bigint, b bigint, c bigint, rate bigint, now bigint, OUT tq bigint, OUT tr bigint)
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE q bigint; r bigint;
BEGIN
  IF a < now THEN
    tq := now; tr := 0;
  ELSIF c = 0 OR c = rate THEN
    tq := a; tr := b;
  ELSE
    q := {{schema}}.mdq(a - now, c, rate); r := {{schema}}.mdr(a - now, c, rate);
    IF q >= 1125899906842624 THEN -- maxDebt, 2^50
      tq := now + 1125899906842624; tr := 0;
    ELSE
      r := r + b;
      tq := now + q + r / rate; tr := r % rate;
    END IF;
  END IF;
END $$;

-- tat_add is algorithm.tatAdd: (tq + tr/rate) + cost*period/rate.
CREATE FUNCTION {{schema}}.tat_add(tq bigint, tr bigint, cost bigint, rate bigint, period bigint, OUT nq bigint, OUT nr bigint)
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE iq bigint; ir bigint;
BEGIN
  iq := {{schema}}.mdq(cost, period, rate); ir := {{schema}}.mdr(cost, period, rate);
  nq := tq + iq; nr := tr + ir;
  IF nr >= rate THEN
    nq := nq + 1; nr := nr - rate;
  END IF;
END $$;

-- tat_remaining is algorithm.tatRemaining: burst - ceil((TAT - now)/T),
-- at least 0, with (TAT - now)/T = ((tq - now)*rate + tr)/period.
CREATE FUNCTION {{schema}}.tat_remaining(tq bigint, tr bigint, now bigint, rate bigint, period bigint, burst bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS
$$ SELECT greatest(burst - {{schema}}.mdq(tq - now, rate, period) - CASE
    WHEN {{schema}}.mdr(tq - now, rate, period) + tr <= 0 THEN 0
    WHEN {{schema}}.mdr(tq - now, rate, period) + tr <= period THEN 1
    ELSE {{schema}}.ceildiv({{schema}}.mdr(tq - now, rate, period) + tr, period) END, 0) $$;

-- tat_delay is algorithm.tatDelay: ceil(TAT - now), at least 0.
CREATE FUNCTION {{schema}}.tat_delay(tq bigint, tr bigint, now bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS
$$ SELECT greatest(tq - now + CASE WHEN tr > 0 THEN 1 ELSE 0 END, 0) $$;

-- refill is algorithm.refillTime: how long until need whole tokens have
-- been refilled, carry/period of the first being there already.
CREATE FUNCTION {{schema}}.refill(need bigint, carry bigint, rate bigint, period bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE q bigint; r bigint;
BEGIN
  q := {{schema}}.mdq(need, period, rate); r := {{schema}}.mdr(need, period, rate);
  RETURN q + {{schema}}.ceildiv(r - carry, rate);
END $$;

-- status is algorithm.Status on an O(1) state: the next state and the
-- Result, cost 0 reporting the state at now. cal holds a calendar's
-- window boundaries b1 < b2 < b3 < b4 (µs), computed by the caller around
-- now: the windows [b1, b2), [b2, b3), [b3, b4).
CREATE FUNCTION {{schema}}.status(alg int, a bigint, b bigint, c bigint,
  rate bigint, period bigint, burst bigint, cal bigint[], now bigint, cost bigint,
  OUT na bigint, OUT nb bigint, OUT nc bigint, OUT allowed boolean,
  OUT remaining bigint, OUT retry bigint, OUT reset bigint, OUT delay bigint)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE w bigint; e bigint; k bigint; q bigint; r bigint;
  tq bigint; tr bigint; nq bigint; nr bigint; bq bigint; br bigint; rr record;
BEGIN
  retry := 0; reset := 0; delay := 0;
  CASE alg
  WHEN 1, 7 THEN
    -- Fixed window (algorithm/fixedwindow.go) and calendar
    -- (algorithm/calendar.go): a the window's start, b its count, c the
    -- calendar window's end.
    na := a; nb := b; nc := c;
    IF alg = 1 THEN
      nc := 0;
      w := {{schema}}.floorwin(now, period);
      IF w > na THEN na := w; nb := 0; END IF;
      e := na + period; -- the window's end
    ELSE
      IF now >= nc THEN
        IF now < cal[2] THEN na := cal[1]; nc := cal[2];
        ELSIF now < cal[3] THEN na := cal[2]; nc := cal[3];
        ELSE na := cal[3]; nc := cal[4];
        END IF;
        nb := 0;
      END IF;
      e := nc;
    END IF;
    allowed := nb + cost <= rate;
    IF allowed THEN
      nb := nb + cost;
    ELSE
      retry := e - now;
    END IF;
    IF nb > 0 THEN reset := e - now; END IF;
    remaining := greatest(rate - nb, 0);
  WHEN 3 THEN
    -- Sliding window counter (algorithm/slidingwindow.go): a the current
    -- window's start, b its count, c the previous window's.
    na := a; nb := b; nc := c;
    w := {{schema}}.floorwin(now, period);
    IF w = na + period THEN
      na := w; nc := nb; nb := 0;
    ELSIF w > na THEN
      na := w; nc := 0; nb := 0;
    END IF;
    e := greatest(now - na, 0);
    k := rate - nb - cost;
    allowed := false;
    IF k >= 0 THEN
      q := {{schema}}.mdq(nc, period - e, period); r := {{schema}}.mdr(nc, period - e, period);
      allowed := q < k OR (q = k AND r = 0);
    END IF;
    IF allowed THEN nb := nb + cost; END IF;
    q := {{schema}}.mdq(nc, period - e, period); r := {{schema}}.mdr(nc, period - e, period);
    IF r > 0 THEN q := q + 1; END IF;
    IF nb > 0 THEN
      reset := na + 2 * period - now;
    ELSIF nc > 0 THEN
      reset := na + period - now;
    END IF;
    remaining := greatest(rate - nb - q, 0);
    IF NOT allowed THEN
      k := rate - nb - cost;
      IF k >= 0 THEN
        q := {{schema}}.mdq(k, period, nc);
        retry := na + period - q - now;
      ELSE
        q := {{schema}}.mdq(rate - cost, period, nb);
        retry := na + period - now + greatest(period - q, 0);
      END IF;
    END IF;
  WHEN 4 THEN
    -- Token bucket (algorithm/tokenbucket.go): a the deficit, b the last
    -- refill, c the carry.
    na := a; nb := b; nc := c;
    IF now > nb THEN
      IF na > 0 THEN
        q := {{schema}}.mdq(now - nb, rate, period); r := {{schema}}.mdr(now - nb, rate, period);
        r := r + nc;
        IF r >= period THEN q := q + 1; r := r - period; END IF;
        IF q >= na THEN
          na := 0; nc := 0;
        ELSE
          na := na - q; nc := r;
        END IF;
      END IF;
      nb := now;
    END IF;
    allowed := na + cost <= burst;
    IF allowed THEN na := na + cost; END IF;
    IF na > 0 THEN reset := nb - now + {{schema}}.refill(na, nc, rate, period); END IF;
    remaining := greatest(burst - na, 0);
    IF NOT allowed THEN
      retry := nb - now + {{schema}}.refill(na + cost - burst, nc, rate, period);
    END IF;
  WHEN 5, 6 THEN
    -- GCRA (algorithm/gcra.go) and the leaky bucket
    -- (algorithm/leakybucket.go): a the TAT in whole µs, b its remainder
    -- over rate, c the rate it is kept at.
    -- tat_at and tat_add, inline.
    IF a < now THEN
      tq := now; tr := 0;
    ELSIF c = 0 OR c = rate THEN
      tq := a; tr := b;
    ELSE
      q := {{schema}}.mdq(a - now, c, rate); r := {{schema}}.mdr(a - now, c, rate);
      IF q >= 1125899906842624 THEN -- maxDebt, 2^50
        tq := now + 1125899906842624; tr := 0;
      ELSE
        r := r + b;
        tq := now + q + r / rate; tr := r % rate;
      END IF;
    END IF;
    nq := tq + {{schema}}.mdq(cost, period, rate); nr := tr + {{schema}}.mdr(cost, period, rate);
    IF nr >= rate THEN nq := nq + 1; nr := nr - rate; END IF;
    bq := {{schema}}.mdq(burst, period, rate); br := {{schema}}.mdr(burst, period, rate);
    allowed := nq - now < bq OR (nq - now = bq AND nr <= br);
    nc := rate;
    IF allowed THEN
      na := nq; nb := nr;
      remaining := {{schema}}.tat_remaining(nq, nr, now, rate, period, burst);
      reset := {{schema}}.tat_delay(nq, nr, now);
      IF alg = 5 AND cost > 0 THEN
        delay := {{schema}}.tat_delay(tq, tr, now);
      END IF;
    ELSE
      na := tq; nb := tr;
      retry := nq - now - bq + CASE WHEN nr > br THEN 1 ELSE 0 END;
      remaining := {{schema}}.tat_remaining(tq, tr, now, rate, period, burst);
      reset := {{schema}}.tat_delay(tq, tr, now);
    END IF;
  ELSE
    RAISE EXCEPTION 'sluice: unknown algorithm code %', alg;
  END CASE;
END $$;

-- apply is algorithm.Apply: the state after recording cost at now whether
-- or not it fits.
CREATE FUNCTION {{schema}}.apply(alg int, a bigint, b bigint, c bigint,
  rate bigint, period bigint, burst bigint, cal bigint[], now bigint, cost bigint,
  OUT na bigint, OUT nb bigint, OUT nc bigint)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE rr record;
BEGIN
  rr := {{schema}}.status(alg, a, b, c, rate, period, burst, cal, now, 0); na := rr.na; nb := rr.nb; nc := rr.nc;
  IF alg IN (1, 3, 7) THEN
    nb := nb + cost;
  ELSIF alg = 4 THEN
    na := na + cost;
  ELSE
    rr := {{schema}}.tat_add(na, nb, cost, rate, period); na := rr.nq; nb := rr.nr;
  END IF;
END $$;

-- token_refund is algorithm.tokenRefund: the token bucket (a, b, c)
-- after giving back cost less what rate/period refills in elapsed µs,
-- exactly: the whole tokens off the deficit and the fraction into the
-- carry, up to full. It gives nothing once cost has refilled.
CREATE FUNCTION {{schema}}.token_refund(a bigint, b bigint, c bigint,
  rate bigint, period bigint, elapsed bigint, cost bigint,
  OUT na bigint, OUT nb bigint, OUT nc bigint)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE whole bigint := cost; frac bigint := 0; q bigint; r bigint; n bigint; m bigint;
BEGIN
  na := a; nb := b; nc := c;
  IF elapsed > 0 THEN
    q := {{schema}}.mdq(cost, period, rate); r := {{schema}}.mdr(cost, period, rate);
    IF elapsed > q OR (elapsed = q AND r = 0) THEN RETURN; END IF;
    n := {{schema}}.mdq(elapsed, rate, period); m := {{schema}}.mdr(elapsed, rate, period);
    whole := cost - n;
    IF m > 0 THEN whole := whole - 1; frac := period - m; END IF;
  END IF;
  nc := nc + frac;
  IF nc >= period THEN nc := nc - period; whole := whole + 1; END IF;
  na := na - whole;
  IF na <= 0 THEN na := 0; nc := 0; END IF; -- full: no fraction of a token beyond it
END $$;

-- refund_state is algorithm.Refund on an O(1) state.
CREATE FUNCTION {{schema}}.refund_state(alg int, a bigint, b bigint, c bigint,
  rate bigint, period bigint, now bigint, taken bigint, cost bigint,
  OUT na bigint, OUT nb bigint, OUT nc bigint)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE w bigint; iq bigint; ir bigint; elapsed bigint; rr record;
BEGIN
  na := a; nb := b; nc := c;
  CASE alg
  WHEN 1 THEN
    IF {{schema}}.floorwin(taken, period) = na THEN nb := nb - least(cost, nb); END IF;
  WHEN 7 THEN
    IF na <= taken AND taken < nc THEN nb := nb - least(cost, nb); END IF;
  WHEN 3 THEN
    w := {{schema}}.floorwin(taken, period);
    IF w = na THEN
      nb := nb - least(cost, nb);
    ELSIF w = na - period THEN
      nc := nc - least(cost, nc);
    END IF;
  WHEN 4 THEN
    rr := {{schema}}.token_refund(a, b, c, rate, period, now - taken, cost); na := rr.na; nb := rr.nb; nc := rr.nc;
  ELSE
    iq := {{schema}}.mdq(cost, period, rate); ir := {{schema}}.mdr(cost, period, rate);
    elapsed := greatest(now - taken, 0);
    IF elapsed < iq OR (elapsed = iq AND ir > 0) THEN
      -- cost*T - elapsed off max(TAT, now): its whole µs and the
      -- remainder below rate.
      rr := {{schema}}.tat_at(a, b, c, rate, now); na := rr.tq; nb := rr.tr;
      na := na - (iq - elapsed); nb := nb - ir;
      IF nb < 0 THEN na := na - 1; nb := nb + rate; END IF;
      IF na < now THEN na := now; nb := 0; END IF;
      nc := rate;
    END IF;
  END CASE;
END $$;

-- log_status is algorithm.SlidingLog on log (pairs of time and cost,
-- oldest first): how many leading entries have left the window, the time
-- an admitted cost is recorded at, and the Result.
CREATE FUNCTION {{schema}}.log_status(log bigint[], rate bigint, period bigint, now bigint, cost bigint,
  OUT drop int, OUT at bigint, OUT allowed boolean,
  OUT remaining bigint, OUT retry bigint, OUT reset bigint)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE n int := coalesce(array_length(log, 1), 0) / 2; total bigint := 0;
  newest bigint := -1; excess bigint; freed bigint := 0;
BEGIN
  retry := 0; reset := 0;
  at := now;
  IF n > 0 AND at < log[2 * n - 1] THEN at := log[2 * n - 1]; END IF;
  drop := 0;
  WHILE drop < n AND log[2 * drop + 1] <= at - period LOOP
    drop := drop + 1;
  END LOOP;
  FOR i IN drop + 1 .. n LOOP
    total := total + log[2 * i];
  END LOOP;
  IF drop < n THEN newest := log[2 * n - 1]; END IF;
  IF total + cost <= rate THEN
    allowed := true;
    total := total + cost;
    IF cost > 0 THEN newest := at; END IF;
  ELSE
    allowed := false;
    excess := total + cost - rate;
    retry := period;
    FOR i IN drop + 1 .. n LOOP
      freed := freed + log[2 * i];
      IF freed >= excess THEN
        retry := log[2 * i - 1] + period - now;
        EXIT;
      END IF;
    END LOOP;
  END IF;
  remaining := greatest(rate - total, 0);
  IF newest >= 0 THEN reset := newest + period - now; END IF;
END $$;

-- log_write returns log without its first drop entries and with cost
-- recorded at at: added to the newest entry when it has that time.
CREATE FUNCTION {{schema}}.log_write(log bigint[], drop int, at bigint, cost bigint) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE n int := coalesce(array_length(log, 1), 0) / 2; kept bigint[]; m int;
BEGIN
  IF drop >= n THEN
    kept := '{}';
  ELSE
    kept := log[2 * drop + 1 : 2 * n];
  END IF;
  m := n - least(drop, n);
  IF m > 0 AND kept[2 * m - 1] = at THEN
    kept[2 * m] := kept[2 * m] + cost;
  ELSE
    kept := kept || ARRAY[at, cost];
  END IF;
  RETURN kept;
END $$;

-- log_refund is algorithm.RefundLog.
CREATE FUNCTION {{schema}}.log_refund(log bigint[], period bigint, now bigint, taken bigint, cost bigint) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE n int := coalesce(array_length(log, 1), 0) / 2; i int := 0; kept bigint[] := '{}';
  e bigint; give bigint;
BEGIN
  IF taken <= now - period THEN RETURN log; END IF;
  WHILE i < n AND log[2 * i + 1] < taken LOOP i := i + 1; END LOOP;
  IF i > 0 THEN kept := log[1 : 2 * i]; END IF;
  FOR j IN i + 1 .. n LOOP
    e := log[2 * j];
    give := least(cost, e);
    e := e - give; cost := cost - give;
    IF e > 0 THEN kept := kept || ARRAY[log[2 * j - 1], e]; END IF;
  END LOOP;
  RETURN kept;
END $$;

-- lock_row locks the row of a state, creating it (as a key never seen)
-- when there is none, and waits for a concurrent creator.
CREATE FUNCTION {{schema}}.lock_row(durable boolean, k bytea, kd text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    IF durable THEN
      PERFORM 1 FROM {{schema}}.quota WHERE key = k AND kind = kd FOR UPDATE;
      EXIT WHEN FOUND;
      INSERT INTO {{schema}}.quota (key, kind, expires) VALUES (k, kd, 0) ON CONFLICT DO NOTHING;
    ELSE
      PERFORM 1 FROM {{schema}}.state WHERE key = k AND kind = kd FOR UPDATE;
      EXIT WHEN FOUND;
      INSERT INTO {{schema}}.state (key, kind, expires) VALUES (k, kd, 0) ON CONFLICT DO NOTHING;
    END IF;
    EXIT WHEN FOUND; -- inserted: locked by this transaction
  END LOOP;
END $$;

-- lock_get locks and returns a state's row, hit false when there is
-- none (nothing is locked then: the caller inserts it, see insert_row).
CREATE FUNCTION {{schema}}.lock_get(durable boolean, k bytea, kd text, clk bigint,
  OUT a bigint, OUT b bigint, OUT c bigint, OUT log bigint[], OUT hit boolean)
LANGUAGE plpgsql AS $$
DECLARE ex bigint;
BEGIN
  IF durable THEN
    SELECT s.a, s.b, s.c, s.log, s.expires INTO a, b, c, log, ex FROM {{schema}}.quota s WHERE s.key = k AND s.kind = kd FOR UPDATE;
  ELSE
    SELECT s.a, s.b, s.c, s.log, s.expires INTO a, b, c, log, ex FROM {{schema}}.state s WHERE s.key = k AND s.kind = kd FOR UPDATE;
  END IF;
  hit := FOUND;
  IF NOT hit OR ex < clk THEN
    a := 0; b := 0; c := 0; log := NULL;
  END IF;
END $$;

-- insert_row inserts a new key's state and reports whether it did: false
-- when a concurrent transaction inserted the key first.
CREATE FUNCTION {{schema}}.insert_row(durable boolean, k bytea, kd text,
  na bigint, nb bigint, nc bigint, ex bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF durable THEN
    INSERT INTO {{schema}}.quota (key, kind, a, b, c, expires) VALUES (k, kd, na, nb, nc, ex) ON CONFLICT DO NOTHING;
  ELSE
    INSERT INTO {{schema}}.state (key, kind, a, b, c, expires) VALUES (k, kd, na, nb, nc, ex) ON CONFLICT DO NOTHING;
  END IF;
  RETURN FOUND;
END $$;

-- load_row returns a state's words and log; a row past its expiry, or
-- none, is a key never seen.
CREATE FUNCTION {{schema}}.load_row(durable boolean, k bytea, kd text, clk bigint,
  OUT a bigint, OUT b bigint, OUT c bigint, OUT log bigint[])
LANGUAGE plpgsql STABLE AS $$
DECLARE ex bigint;
BEGIN
  IF durable THEN
    SELECT s.a, s.b, s.c, s.log, s.expires INTO a, b, c, log, ex FROM {{schema}}.quota s WHERE s.key = k AND s.kind = kd;
  ELSE
    SELECT s.a, s.b, s.c, s.log, s.expires INTO a, b, c, log, ex FROM {{schema}}.state s WHERE s.key = k AND s.kind = kd;
  END IF;
  IF NOT FOUND OR ex < clk THEN
    a := 0; b := 0; c := 0; log := NULL;
  END IF;
END $$;

-- save_row writes a locked row.
CREATE FUNCTION {{schema}}.save_row(durable boolean, k bytea, kd text,
  na bigint, nb bigint, nc bigint, nlog bigint[], ex bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF durable THEN
    UPDATE {{schema}}.quota SET a = na, b = nb, c = nc, log = nlog, expires = ex WHERE key = k AND kind = kd;
  ELSE
    UPDATE {{schema}}.state SET a = na, b = nb, c = nc, log = nlog, expires = ex WHERE key = k AND kind = kd;
  END IF;
END $$;

-- take decides groups of requests, each group all-or-nothing: the twin of
-- memstore's TakeAll and of redisstore's take.lua. Groups are
-- independent: several callers' calls share one call of take.
--
-- Per request: keys, kinds, durable (the logged table quota, or the
-- unlogged state), lims (eight numbers: algorithm code, rate, period in
-- µs, burst, and a calendar's four window boundaries, else zeros), costs,
-- forced (sluice.Request.Forced), refunds (the time in µs a refund's cost
-- was taken, else null; a refund is a group of its own). Per group: its
-- number of requests, its time in µs (null: the database's clock), its
-- idempotency ID (null for none): a group whose ID was applied in the
-- last minute is only reported.
--
-- It returns five numbers per request: 1 if allowed else 0, remaining,
-- retry after, reset after and delay, in µs.
CREATE FUNCTION {{schema}}.take(keys bytea[], kinds text[], durable boolean[], lims bigint[],
  costs bigint[], forced boolean[], refunds bigint[], groups int[], nows bigint[], ids bytea[])
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  clk bigint := {{schema}}.clock();
  n int := array_length(keys, 1);
  res bigint[] := array_fill(0::bigint, ARRAY[5 * n]);
  -- Per request: the state read (x), the next (y), the Result, whether
  -- forced, its cost, and a log's drop and at.
  xa bigint[] := array_fill(0::bigint, ARRAY[n]); xb bigint[] := xa; xc bigint[] := xa;
  ya bigint[] := xa; yb bigint[] := xa; yc bigint[] := xa;
  rem bigint[] := xa; ret bigint[] := xa; rst bigint[] := xa; dly bigint[] := xa;
  cst bigint[] := xa; ats bigint[] := xa; drops int[] := array_fill(0, ARRAY[n]);
  ok boolean[] := array_fill(false, ARRAY[n]); frc boolean[] := ok;
  rw record; s record; one record; l record; y record; rr record;
  first int := 1; last int; now bigint; alg int; o int; rate bigint; period bigint;
  cal bigint[]; all_ok boolean; replay boolean; lg bigint[];
BEGIN
  IF n = 1 AND refunds[1] IS NULL AND ids[1] IS NULL AND lims[1] <> 2 THEN
    -- One request on an O(1) state, most calls: the general path below
    -- without its arrays and its second pass.
    now := coalesce(nows[1], clk); alg := lims[1]; rate := lims[2]; period := lims[3]; cal := lims[5 : 8];
    LOOP
      IF costs[1] > 0 THEN
        l := {{schema}}.lock_get(durable[1], keys[1], kinds[1], clk);
      ELSE
        l := {{schema}}.load_row(durable[1], keys[1], kinds[1], clk);
      END IF;
      s := {{schema}}.status(alg, l.a, l.b, l.c, rate, period, lims[4], cal, now, costs[1]);
      res := ARRAY[CASE WHEN s.allowed THEN 1 ELSE 0 END, s.remaining, s.retry, s.reset, s.delay];
      IF costs[1] = 0 THEN
        one := {{schema}}.status(alg, l.a, l.b, l.c, rate, period, lims[4], cal, now, 1);
        res[1] := CASE WHEN one.allowed THEN 1 ELSE 0 END; res[3] := one.retry; res[5] := one.delay;
        EXIT;
      END IF;
      IF s.allowed THEN
        y := s;
      ELSIF forced[1] THEN
        y := {{schema}}.apply(alg, l.a, l.b, l.c, rate, period, lims[4], cal, now, costs[1]);
        rr := {{schema}}.status(alg, y.na, y.nb, y.nc, rate, period, lims[4], cal, now, 0);
        res[2] := 0; res[4] := rr.reset; res[5] := 0;
      ELSE
        EXIT; -- denied: nothing to write
      END IF;
      IF l.hit THEN
        PERFORM {{schema}}.save_row(durable[1], keys[1], kinds[1], y.na, y.nb, y.nc, NULL, clk + greatest(res[4], 0) + 1000000);
        EXIT;
      END IF;
      -- A new key: inserted with its state, unless a concurrent check
      -- inserted it first, whose row is then locked and decided on.
      EXIT WHEN {{schema}}.insert_row(durable[1], keys[1], kinds[1], y.na, y.nb, y.nc, clk + greatest(res[4], 0) + 1000000);
    END LOOP;
    RETURN res;
  END IF;
  -- Lock every row the call may write, in one order, so that calls on
  -- the same keys never wait for each other in a cycle.
  FOR rw IN SELECT DISTINCT u.d, u.k, u.kd FROM unnest(keys, kinds, durable, costs, refunds) AS u(k, kd, d, c, rf)
      WHERE u.c > 0 OR u.rf IS NOT NULL ORDER BY u.d, u.k, u.kd LOOP
    PERFORM {{schema}}.lock_row(rw.d, rw.k, rw.kd);
  END LOOP;
  FOR g IN 1 .. array_length(groups, 1) LOOP
    last := first + groups[g] - 1;
    now := coalesce(nows[g], clk);
    replay := false;
    IF ids[g] IS NOT NULL THEN
      INSERT INTO {{schema}}.calls AS c (key, id, expires) VALUES (keys[first], ids[g], clk + 60000000)
        ON CONFLICT (key, id) DO UPDATE SET expires = excluded.expires WHERE c.expires < clk;
      replay := NOT FOUND;
    END IF;
    IF refunds[first] IS NOT NULL THEN
      -- A refund (algorithm/refund.go): never denied.
      alg := lims[8 * first - 7]; rate := lims[8 * first - 6]; period := lims[8 * first - 5];
      l := {{schema}}.load_row(durable[first], keys[first], kinds[first], clk);
      IF alg = 2 THEN
        lg := {{schema}}.log_refund(l.log, period, now, refunds[first], costs[first]);
        s := {{schema}}.log_status(lg, rate, period, now, 0);
        IF l.log IS NOT NULL THEN
          PERFORM {{schema}}.save_row(durable[first], keys[first], kinds[first], 0, 0, 0, lg, clk + greatest(s.reset, 0) + 1000000);
        END IF;
        res[5 * first - 4] := 1; res[5 * first - 3] := s.remaining; res[5 * first - 1] := s.reset;
      ELSE
        cal := lims[8 * first - 3 : 8 * first];
        y := {{schema}}.refund_state(alg, l.a, l.b, l.c, rate, period, now, refunds[first], costs[first]);
        s := {{schema}}.status(alg, y.na, y.nb, y.nc, rate, period, lims[8 * first - 4], cal, now, 0);
        IF l.a <> 0 OR l.b <> 0 OR l.c <> 0 THEN
          PERFORM {{schema}}.save_row(durable[first], keys[first], kinds[first], y.na, y.nb, y.nc, NULL, clk + greatest(s.reset, 0) + 1000000);
        END IF;
        res[5 * first - 4] := 1; res[5 * first - 3] := s.remaining; res[5 * first - 1] := s.reset;
      END IF;
      first := last + 1;
      CONTINUE;
    END IF;
    all_ok := true;
    FOR i IN first .. last LOOP
      o := 8 * (i - 1);
      alg := lims[o + 1]; rate := lims[o + 2]; period := lims[o + 3];
      cst[i] := CASE WHEN replay THEN 0 ELSE costs[i] END;
      frc[i] := forced[i] AND cst[i] > 0;
      l := {{schema}}.load_row(durable[i], keys[i], kinds[i], clk);
      IF alg = 2 THEN
        s := {{schema}}.log_status(l.log, rate, period, now, cst[i]);
        drops[i] := s.drop; ats[i] := s.at; ok[i] := s.allowed;
        rem[i] := s.remaining; ret[i] := s.retry; rst[i] := s.reset;
        IF cst[i] = 0 THEN
          one := {{schema}}.log_status(l.log, rate, period, now, 1);
          ok[i] := one.allowed; ret[i] := one.retry;
        END IF;
        IF frc[i] AND NOT ok[i] THEN
          rem[i] := 0; rst[i] := s.at + period - now;
        END IF;
      ELSE
        cal := lims[o + 5 : o + 8];
        xa[i] := l.a; xb[i] := l.b; xc[i] := l.c;
        s := {{schema}}.status(alg, l.a, l.b, l.c, rate, period, lims[o + 4], cal, now, cst[i]);
        ya[i] := s.na; yb[i] := s.nb; yc[i] := s.nc; ok[i] := s.allowed;
        rem[i] := s.remaining; ret[i] := s.retry; rst[i] := s.reset; dly[i] := s.delay;
        IF cst[i] = 0 THEN
          one := {{schema}}.status(alg, l.a, l.b, l.c, rate, period, lims[o + 4], cal, now, 1);
          ok[i] := one.allowed; ret[i] := one.retry; dly[i] := one.delay;
        END IF;
        IF frc[i] AND NOT ok[i] THEN
          y := {{schema}}.apply(alg, l.a, l.b, l.c, rate, period, lims[o + 4], cal, now, cst[i]);
          ya[i] := y.na; yb[i] := y.nb; yc[i] := y.nc;
          rr := {{schema}}.status(alg, y.na, y.nb, y.nc, rate, period, lims[o + 4], cal, now, 0); rst[i] := rr.reset;
          rem[i] := 0; dly[i] := 0;
        END IF;
      END IF;
      all_ok := all_ok AND (ok[i] OR frc[i]);
    END LOOP;
    FOR i IN first .. last LOOP
      o := 8 * (i - 1);
      alg := lims[o + 1]; rate := lims[o + 2]; period := lims[o + 3];
      IF cst[i] > 0 AND (all_ok OR frc[i]) THEN
        IF alg = 2 THEN
          lg := {{schema}}.log_write(({{schema}}.load_row(durable[i], keys[i], kinds[i], clk)).log, drops[i], ats[i], cst[i]);
          PERFORM {{schema}}.save_row(durable[i], keys[i], kinds[i], 0, 0, 0, lg, clk + greatest(rst[i], 0) + 1000000);
        ELSE
          PERFORM {{schema}}.save_row(durable[i], keys[i], kinds[i], ya[i], yb[i], yc[i], NULL, clk + greatest(rst[i], 0) + 1000000);
        END IF;
      ELSIF NOT all_ok AND ok[i] THEN
        -- A denied group: the limits that allowed report their unchanged state.
        IF alg = 2 THEN
          s := {{schema}}.log_status(({{schema}}.load_row(durable[i], keys[i], kinds[i], clk)).log, rate, period, now, 0);
          ok[i] := s.allowed; rem[i] := s.remaining; ret[i] := s.retry; rst[i] := s.reset; dly[i] := 0;
        ELSE
          s := {{schema}}.status(alg, xa[i], xb[i], xc[i], rate, period, lims[o + 4], lims[o + 5 : o + 8], now, 0);
          ok[i] := s.allowed; rem[i] := s.remaining; ret[i] := s.retry; rst[i] := s.reset; dly[i] := s.delay;
        END IF;
      END IF;
      res[5 * i - 4] := CASE WHEN ok[i] THEN 1 ELSE 0 END;
      res[5 * i - 3] := rem[i]; res[5 * i - 2] := ret[i]; res[5 * i - 1] := rst[i]; res[5 * i] := dly[i];
    END LOOP;
    first := last + 1;
  END LOOP;
  RETURN res;
END $$;

-- sweep deletes the rows past their expiry in blocks [start, start +
-- blocks) of one table (quota when durable, else state, and the expired
-- idempotency IDs with it), skipping rows a transaction holds, and
-- returns the block to start from next: 0 after the table's last.
CREATE FUNCTION {{schema}}.sweep(durable boolean, start bigint, blocks bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE clk bigint := {{schema}}.clock(); total bigint; lo tid := format('(%s,0)', start)::tid;
  hi tid := format('(%s,0)', start + blocks)::tid;
BEGIN
  IF durable THEN
    total := pg_relation_size('{{schema}}.quota') / current_setting('block_size')::bigint;
    DELETE FROM {{schema}}.quota WHERE ctid = ANY(ARRAY(
      SELECT ctid FROM {{schema}}.quota WHERE ctid >= lo AND ctid < hi AND expires < clk FOR UPDATE SKIP LOCKED));
  ELSE
    total := pg_relation_size('{{schema}}.state') / current_setting('block_size')::bigint;
    DELETE FROM {{schema}}.state WHERE ctid = ANY(ARRAY(
      SELECT ctid FROM {{schema}}.state WHERE ctid >= lo AND ctid < hi AND expires < clk FOR UPDATE SKIP LOCKED));
    DELETE FROM {{schema}}.calls WHERE ctid = ANY(ARRAY(
      SELECT ctid FROM {{schema}}.calls WHERE ctid >= lo AND ctid < hi AND expires < clk FOR UPDATE SKIP LOCKED));
  END IF;
  IF start + blocks >= total THEN
    RETURN 0;
  END IF;
  RETURN start + blocks;
END $$;

-- forget deletes a state (sluice.Store.Reset).
CREATE FUNCTION {{schema}}.forget(k bytea, kd text) RETURNS void
LANGUAGE sql AS $$
  DELETE FROM {{schema}}.state WHERE key = k AND kind = kd;
  DELETE FROM {{schema}}.quota WHERE key = k AND kind = kd;
$$;
