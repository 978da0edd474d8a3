// Package door holds the rules every front door of sluice applies to a
// request, whatever its protocol. The doors: httplimit (and, through it,
// sluice proxy and /v1/forward-auth, in internal/proxy), grpclimit, and
// sluice serve's POST /v1/check, native gRPC Check, and Envoy's rate
// limit service over gRPC and /json (internal/server). A door finds each
// matching policy's key its own way; from there the rules are these, in
// one copy:
//
//   - one identity rule: an identity that is empty, longer than
//     sluice.MaxIdentityLen, not UTF-8 or holding a control character is
//     refused as invalid before anything is decided, never let through
//     unlimited, nothing charged (Identity for what a client names, Key
//     for what a key function composed). Every door applies it;
//   - a key that cannot be found is decided by the policy's Missing (OnMissing);
//   - a policy's concurrency slot is taken before its rate is decided, and a
//     refusal, or any refusal after it, releases every slot the request holds;
//   - enforced policies are decided together, all-or-nothing, shadow ones
//     apart, in one Guard call (Batch.Decide);
//   - the request is counted under one label: the policy whose concurrency
//     refused it, else the first enforced policy, else the first shadow one;
//   - the answer is one of Proceed, Invalid (400, InvalidArgument),
//     Unavailable (503, Unavailable: a closed failure, retried after
//     UnavailableRetry) and Limited (429, ResourceExhausted), with the
//     decision closest to its limit for the rate headers.
//
// The middleware doors (httplimit, grpclimit) decide through Batch. The
// service's doors apply the identity rule and UnavailableRetry here, and
// decide each check on its own through the Guard (internal/server's
// decide): a check names its policy and key, so there is nothing to
// match, and no concurrency to hold.
//
// # Adding a door
//
//  1. One file that reads the protocol's request: each input only from
//     the party that sets it (DESIGN's trust boundaries), each bound (a
//     body, a batch) checked before anything is decided.
//  2. Every identity a client names passes Identity (a key function's
//     composition: Key) before any policy is decided; a refusal is the
//     protocol's invalid argument (400, InvalidArgument) and charges
//     nothing, whichever identity of the request it was.
//  3. A request without its key goes by OnMissing; policies go into one
//     Batch (Apply, Hold, Add), decided once (Decide), slots released
//     when it is refused.
//  4. The Answer maps to the protocol's codes as above, the closest
//     decision's RetryAfter (or UnavailableRetry) as its retry delay.
//  5. The request is counted once, under Batch.Labeled (in sluice
//     serve's process: the server's CountCheck; a door outside
//     internal/server reaches it through a small interface of its own
//     that *server.Server implements, as internal/proxy's Accounting,
//     never through function fields), and a key is shown on a page or
//     in a log only as config.ShownKey shows it.
//  6. Registered where it listens (cmd/sluice, or a listener of
//     internal/server), and given a row in internal/server's
//     TestEveryDoorOneIdentityRule, which sends the same good and bad
//     identities through every door and requires the same outcome and
//     nothing charged.
package door
