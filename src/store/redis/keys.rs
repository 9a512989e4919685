//! The Redis key layout: every key and channel name the Redis store uses is built here, and
//! only here. The guide's key tables list the same names (`keys/tests.rs` reads them).
//!
//! Every key carries a Redis Cluster hash tag, `{<encoded name>}`, that is the same for all the
//! keys of one lock and for all the keys of one queue: the scripts that touch several of them
//! run on one node.

use crate::key::{LockKey, Prefix, hash_tag};
use crate::queue::{JobId, JobSet, QueueName};

/// `<prefix>:<kind>:{<encoded name>}<suffix>`.
fn tagged(prefix: &Prefix, kind: &str, name: &str, suffix: &str) -> String {
    let tag = hash_tag(name);
    let mut out = String::with_capacity(prefix.as_str().len() + kind.len() + tag.len() + suffix.len() + 4);
    out.push_str(prefix.as_str());
    out.push(':');
    out.push_str(kind);
    out.push_str(":{");
    out.push_str(&tag);
    out.push('}');
    out.push_str(suffix);
    out
}

/// The names of one lock key's Redis keys and channels, `<prefix>:<kind>:<tag>` for each of
/// `N` kinds, written into one buffer: built on every acquire and release, one allocation
/// where a `String` per name took one each.
#[derive(Debug, Clone)]
pub(crate) struct TaggedNames<const N: usize> {
    /// Every name in the order of its kinds, back to back.
    names: String,
    /// Where each name ends in `names`.
    ends: [usize; N],
}

impl<const N: usize> TaggedNames<N> {
    /// Every name of `kinds` with the tag written from its `parts`: no string is built for the
    /// tag alone.
    fn new(prefix: &Prefix, kinds: &[&str; N], parts: [&str; 3]) -> Self {
        Self::with_suffixes(prefix, &kinds.map(|kind| (kind, "")), parts)
    }

    /// Every name `<prefix>:<kind>:<parts><suffix>` of `names`, each a kind and a suffix.
    fn with_suffixes(prefix: &Prefix, names: &[(&str, &str); N], parts: [&str; 3]) -> Self {
        let prefix = prefix.as_str();
        let tag: usize = parts.iter().map(|part| part.len()).sum();
        let own: usize = names.iter().map(|(kind, suffix)| kind.len() + suffix.len()).sum();
        let mut buffer = String::with_capacity(N * (prefix.len() + tag + 2) + own);
        let mut ends = [0; N];
        for ((kind, suffix), end) in names.iter().zip(&mut ends) {
            buffer.push_str(prefix);
            buffer.push(':');
            buffer.push_str(kind);
            buffer.push(':');
            for part in parts {
                buffer.push_str(part);
            }
            buffer.push_str(suffix);
            *end = buffer.len();
        }
        TaggedNames { names: buffer, ends }
    }

    /// The tag's parts for a lock key: `{<encoded name>}`.
    fn of_key(prefix: &Prefix, kinds: &[&str; N], key: &LockKey) -> Self {
        Self::new(prefix, kinds, ["{", &hash_tag(key.as_str()), "}"])
    }

    fn name(&self, index: usize) -> &str {
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.names[start..self.ends[index]]
    }

    fn all(&self) -> impl Iterator<Item = &str> {
        (0..N).map(|index| self.name(index))
    }

    /// Every name, in the order of its kinds.
    pub(crate) fn get(&self) -> [&str; N] {
        std::array::from_fn(|index| self.name(index))
    }
}

/// The keys of one lock, in the order every lock script receives them in `KEYS`: the shared
/// Lua prelude (`lua/lock_prelude.lua`) names them in this order.
#[derive(Debug, Clone)]
pub(crate) struct LockKeys(TaggedNames<{ LOCK_KINDS.len() }>);

/// The kinds of a lock's names, in the order of the scripts' `KEYS`, then the channels.
const LOCK_KINDS: [&str; 7] = ["lock", "fence", "waiters", "handoff", "holds", "wake", "stop"];

/// One of a lock's names, for the calls that need only some of them ([`LockKeys::only`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum LockName {
    /// [`LockKeys::lock`].
    Lock = 0,
    /// [`LockKeys::fence`].
    Fence = 1,
    /// [`LockKeys::waiters`].
    Waiters = 2,
    /// string: the key's typical hold in ms (expires a minute after the last release).
    Holds = 4,
}

/// The hash tag, braces included, of every Redis key of the lock key `key` (mutex or semaphore).
fn lock_tag(key: &LockKey) -> String {
    format!("{{{}}}", hash_tag(key.as_str()))
}

/// The Redis key of `kind` for the lock whose hash tag is `tag`: `<prefix>:<kind>:<tag>`.
fn lock_part(prefix: &Prefix, kind: &str, tag: &str) -> String {
    format!("{}:{kind}:{tag}", prefix.as_str())
}

impl LockKeys {
    pub(crate) fn new(prefix: &Prefix, key: &LockKey) -> Self {
        LockKeys(TaggedNames::of_key(prefix, &LOCK_KINDS, key))
    }

    /// Only the names `which` of the lock key `key`, for the calls of every request (the
    /// free key's acquire, the release, the extension): a script's call needs all seven, these
    /// one to three, and the bytes written are the client's share of each request.
    pub(crate) fn only<const N: usize>(
        prefix: &Prefix,
        key: &LockKey,
        which: [LockName; N],
    ) -> TaggedNames<N> {
        TaggedNames::of_key(prefix, &which.map(|name| LOCK_KINDS[name as usize]), key)
    }

    /// The keys that go with a lock key found by a scan, whose tag (`{...}`) is as found.
    pub(crate) fn of_found_tag(prefix: &Prefix, tag: &str) -> Self {
        LockKeys(TaggedNames::new(prefix, &LOCK_KINDS, [tag, "", ""]))
    }

    /// string: the holder's token (PX ttl), or `@<waiter>` while reserved for a waiter.
    pub(crate) fn lock(&self) -> &str {
        self.0.name(0)
    }

    /// counter: the last fencing token; outlives the lock, expires a minute after it was raised.
    pub(crate) fn fence(&self) -> &str {
        self.0.name(1)
    }

    /// zset: waiter -> arrival order; the key's line.
    pub(crate) fn waiters(&self) -> &str {
        self.0.name(2)
    }

    /// pub/sub channel: who the key was handed to. Not a key: scripts get it in `ARGV[1]`.
    pub(crate) fn wake(&self) -> &str {
        self.0.name(5)
    }

    /// pub/sub channel: newer requests asking the key's holders to stop (mutex or semaphore).
    pub(crate) fn stop(&self) -> &str {
        self.0.name(6)
    }

    /// The keys in the order of the scripts' `KEYS` (the fifth, between the line and the
    /// holds, is the string naming the waiter the key was last reserved for).
    pub(crate) fn in_script_order(&self) -> [&str; 5] {
        [0, 1, 2, 3, 4].map(|index| self.0.name(index))
    }

    /// Every name of the lock: its keys, then its channels.
    pub(crate) fn all(&self) -> impl Iterator<Item = &str> {
        self.0.all()
    }
}

/// The keys of one semaphore, in the order every permit script receives them in `KEYS`: the
/// shared Lua prelude (`lua/permit_prelude.lua`) names them in this order. Apart from a mutex's
/// keys of the same name: a key is guarded by one or the other.
#[derive(Debug, Clone)]
pub(crate) struct PermitKeys(TaggedNames<{ PERMIT_KINDS.len() }>);

/// The kinds of a semaphore's names, in the order of the scripts' `KEYS`, then its channel.
const PERMIT_KINDS: [&str; 9] = [
    "permits",
    "permit-fences",
    "permit-fence",
    "permit-limit",
    "permit-waiters",
    "permit-holds",
    "permit-writers",
    "permit-first",
    "permit-wake",
];

/// One of a semaphore's names, for the calls that need only some of them
/// ([`PermitKeys::only`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum PermitName {
    /// zset: holder -> lease deadline, `@<waiter>` -> reservation deadline (ms, server clock).
    /// A holder is its token, a writer's `!<token>` (a read-write lock's writer holds alone).
    Permits = 0,
    /// [`PermitKeys::fences`].
    Fences = 1,
    /// [`PermitKeys::fence`].
    Fence = 2,
    /// [`PermitKeys::limit`].
    Limit = 3,
    /// [`PermitKeys::waiters`].
    Waiters = 4,
    /// string: the key's typical hold in ms (expires a minute after the last release).
    Holds = 5,
    /// [`PermitKeys::first`].
    First = 7,
}

impl PermitKeys {
    pub(crate) fn new(prefix: &Prefix, key: &LockKey) -> Self {
        PermitKeys(TaggedNames::of_key(prefix, &PERMIT_KINDS, key))
    }

    /// Only the names `which` of the semaphore key `key`, for the calls of every uncontended
    /// request (the first permit's acquire, the free-key acquire, the release), as
    /// [`LockKeys::only`].
    pub(crate) fn only<const N: usize>(
        prefix: &Prefix,
        key: &LockKey,
        which: [PermitName; N],
    ) -> TaggedNames<N> {
        TaggedNames::of_key(prefix, &which.map(|name| PERMIT_KINDS[name as usize]), key)
    }

    /// The keys that go with a semaphore found by a scan, whose tag (`{...}`) is as found.
    pub(crate) fn of_found_tag(prefix: &Prefix, tag: &str) -> Self {
        PermitKeys(TaggedNames::new(prefix, &PERMIT_KINDS, [tag, "", ""]))
    }

    /// hash: holder (as in `permits`) -> the fencing token of its permit.
    pub(crate) fn fences(&self) -> &str {
        self.0.name(1)
    }

    /// counter: the last fencing token handed out; outlives the permits.
    pub(crate) fn fence(&self) -> &str {
        self.0.name(2)
    }

    /// string: how many permits the last acquire allowed, for operators' tools (expires with
    /// that acquire's TTL).
    pub(crate) fn limit(&self) -> &str {
        self.0.name(3)
    }

    /// zset: waiter -> arrival order; the key's line.
    pub(crate) fn waiters(&self) -> &str {
        self.0.name(4)
    }

    /// set: the waiters in line that write (a read-write lock's writers).
    pub(crate) fn writers(&self) -> &str {
        self.0.name(6)
    }

    /// string: `<holder>|<limit>`, the permit taken on a free key by plain commands (PX its
    /// lease), as the mutex's key holds its holder: a permit nobody else holds costs one key.
    /// Counted with the holders of `permits`; the others take theirs there.
    pub(crate) fn first(&self) -> &str {
        self.0.name(7)
    }

    /// pub/sub channel: who a permit was reserved for. Not a key: scripts get it in `ARGV[1]`.
    pub(crate) fn wake(&self) -> &str {
        self.0.name(8)
    }

    /// The keys in the order of the scripts' `KEYS`.
    pub(crate) fn in_script_order(&self) -> [&str; 8] {
        [0, 1, 2, 3, 4, 5, 6, 7].map(|index| self.0.name(index))
    }

    /// Every name of the semaphore: its keys, then its channel.
    pub(crate) fn all(&self) -> impl Iterator<Item = &str> {
        self.0.all()
    }
}

/// The keys of one throttled key: `lua/throttle.lua` receives the state and the bookings in
/// `KEYS`, `lua/throttle_close.lua` the state and the closing.
#[derive(Debug, Clone)]
pub(crate) struct ThrottleKeys {
    /// string: `<free_at>`, or `<free_at> <run_free_at>` once they differ: when the key's next
    /// slot opens by its schedule and by its runs (microseconds since the epoch, server clock).
    pub(crate) state: String,
    /// zset: waiter (a job, or a caller waiting in place) -> its booked slot (microseconds),
    /// until it comes.
    pub(crate) bookings: String,
    /// string: `<until> <free_at> <run_free_at>`, while the key is closed: until when, and the
    /// two times of the schedule its closing found (microseconds since the epoch), for
    /// operators' tools and a reopening.
    pub(crate) closed: String,
}

impl ThrottleKeys {
    pub(crate) fn new(prefix: &Prefix, key: &LockKey) -> Self {
        Self::with_tag(prefix, &lock_tag(key))
    }

    /// The keys that go with a throttled key found by a scan, whose tag (`{...}`) is as found.
    pub(crate) fn of_found_tag(prefix: &Prefix, tag: &str) -> Self {
        Self::with_tag(prefix, tag)
    }

    fn with_tag(prefix: &Prefix, tag: &str) -> Self {
        ThrottleKeys {
            state: lock_part(prefix, "throttle", tag),
            bookings: lock_part(prefix, "throttle-bookings", tag),
            closed: lock_part(prefix, "throttle-closed", tag),
        }
    }

    /// Every key of the throttled key.
    pub(crate) fn all(&self) -> [&str; 3] {
        [&self.state, &self.bookings, &self.closed]
    }
}

/// The start of every throttled key's state under `prefix`, before its hash tag.
pub(crate) fn throttles_namespace(prefix: &Prefix) -> String {
    format!("{}:throttle:", prefix.as_str())
}

/// The start of every semaphore's permits key under `prefix`, before its hash tag.
pub(crate) fn permits_namespace(prefix: &Prefix) -> String {
    format!("{}:permits:", prefix.as_str())
}

/// The set of queue names the queues register (`<prefix>:queues`), for operators' tools.
pub(crate) fn registry_key(prefix: &Prefix) -> String {
    format!("{}:queues", prefix.as_str())
}

/// The hash of the registered queues' shard counts (`<prefix>:queue-shards`): name -> count.
pub(crate) fn registry_shards_key(prefix: &Prefix) -> String {
    format!("{}:queue-shards", prefix.as_str())
}

/// The set of the registered queues whose activity is not counted (`<prefix>:queue-uncounted`),
/// as their schedulers said when they started.
pub(crate) fn registry_uncounted_key(prefix: &Prefix) -> String {
    format!("{}:queue-uncounted", prefix.as_str())
}

/// The key the store tries the server's conditional commands on when it connects; never
/// written (the commands find it missing and do nothing).
pub(crate) fn probe_key(prefix: &Prefix) -> String {
    format!("{}:probe", prefix.as_str())
}

/// The start of every lock key under `prefix`, before its hash tag (`<prefix>:lock:`).
pub(crate) fn lock_namespace(prefix: &Prefix) -> String {
    format!("{}:lock:", prefix.as_str())
}

/// The start of every mutex's line under `prefix`, before its hash tag.
pub(crate) fn waiters_namespace(prefix: &Prefix) -> String {
    format!("{}:waiters:", prefix.as_str())
}

/// The start of every semaphore's line under `prefix`, before its hash tag.
pub(crate) fn permit_waiters_namespace(prefix: &Prefix) -> String {
    format!("{}:permit-waiters:", prefix.as_str())
}

/// Where the first permits of semaphores live (`<prefix>:permit-first:{...}`): a semaphore
/// held by one permit has no `permits` key.
pub(crate) fn permit_first_namespace(prefix: &Prefix) -> String {
    format!("{}:permit-first:", prefix.as_str())
}

/// The keys of one queue, in the order every queue script receives them in `KEYS`: the shared
/// Lua prelude (`lua/queue_prelude.lua`) names them in this order. Built for every claim and
/// ack batch: one buffer, where a `String` per name took twenty-one allocations.
#[derive(Debug, Clone)]
pub(crate) struct QueueKeys(TaggedNames<{ QUEUE_SUFFIXES.len() }>);

/// The names of a queue, `<prefix>:q:{<encoded name>}<suffix>`: the scripts' `KEYS` in order,
/// then the two keys of the scripts that end jobs' waits, then the channel.
const QUEUE_SUFFIXES: [&str; 21] = [
    // zset: job id -> due time (ms since the epoch, server clock).
    ":delayed",
    // zset: lease -> its deadline (ms): a claim's lease (`<token>:<first fence>`, holding the
    // jobs it took); 0.3 also wrote leases of one job's own, named by the job's id.
    ":inflight",
    // hash: job id -> envelope bytes.
    ":jobs",
    // hash: job id in flight -> its holder, as 0.3 wrote it (nothing writes it now: read to
    // recover the jobs a 0.3 scheduler left in flight).
    ":leases",
    // zset: job id -> time buried (ms).
    ":dead",
    // hash: job id -> why it was buried.
    ":errors",
    // hash: job id -> how many of its leases ran out.
    ":expiries",
    // counter: the last job fencing token a claim handed out.
    ":fence",
    // hash: job id -> 1, when its lock was handed to it while it was in flight.
    ":handed",
    // zset: job id -> time finished (ms), the finished jobs a retention keeps.
    ":done",
    // hash: job id -> envelope bytes of a job in `done`.
    ":finished",
    // hash: `<minute>:<counter>` -> count, the last hour's activity.
    ":activity",
    // string: present while the queue is paused.
    ":paused",
    // hash: a claim's lease -> the ids it claimed (MessagePack), `<lease>@` -> a flag per id,
    // `1` while the lease holds it; `held` -> how many jobs the leases hold.
    ":claims",
    // zset: job id -> its start tag, of the due jobs of a queue with groups (fair order).
    ":ready",
    // zset: job id -> due time (ms), of the jobs in `ready`.
    ":ready-due",
    // hash: job id -> `<weight> <group>`, of a grouped job.
    ":groups",
    // zset: `<weight> <group>` -> the start tag of its next ready job.
    ":group-tags",
    // hash: a lock key's `pending_field` -> the record of its waiting job (`Coalesce`,
    // `DebounceLayer`): `KEYS[19]` of the scripts that end jobs' waits.
    ":pending",
    // hash: a waiting job's id -> its lock key's field in `pending`: `KEYS[20]` of those.
    ":pending-jobs",
    // pub/sub channel: a job became the first due. Not a key: scripts get it in `ARGV[1]`.
    ":wake",
];

/// How many of a queue's names are the `KEYS` of every queue script.
const QUEUE_SCRIPT_KEYS: usize = 18;

impl QueueKeys {
    /// Where the names read on their own are in [`QUEUE_SUFFIXES`] (`keys/tests.rs` checks).
    const ACTIVITY: usize = 11;
    const PENDING: usize = QUEUE_SCRIPT_KEYS;
    const WAKE: usize = QUEUE_SCRIPT_KEYS + 2;

    pub(crate) fn new(prefix: &Prefix, name: &QueueName) -> Self {
        let tag = hash_tag(name.as_str());
        QueueKeys(TaggedNames::with_suffixes(
            prefix,
            &QUEUE_SUFFIXES.map(|suffix| ("q", suffix)),
            ["{", &tag, "}"],
        ))
    }

    /// The keys in the order of the scripts' `KEYS`.
    pub(crate) fn in_script_order(&self) -> [&str; QUEUE_SCRIPT_KEYS] {
        std::array::from_fn(|index| self.0.name(index))
    }

    /// hash: `<minute>:<counter>` -> count, the last hour's activity.
    pub(crate) fn activity(&self) -> &str {
        self.0.name(Self::ACTIVITY)
    }

    /// The two keys after the scripts' own of the scripts that end jobs' waits: `pending`
    /// and `pending-jobs`.
    pub(crate) fn pending(&self) -> [&str; 2] {
        [self.0.name(Self::PENDING), self.0.name(Self::PENDING + 1)]
    }

    /// pub/sub channel: a job became the first due.
    pub(crate) fn wake(&self) -> &str {
        self.0.name(Self::WAKE)
    }

    /// Every name of the queue: its keys, then its channel.
    pub(crate) fn all(&self) -> impl Iterator<Item = &str> {
        self.0.all()
    }

    /// string: the record of request `id` on this queue shard (`running` or `finished`, with
    /// its TTL), for the idempotency guard: `KEYS[19]` of `request_record.lua`.
    pub(crate) fn request(prefix: &Prefix, name: &QueueName, id: &JobId) -> String {
        tagged(prefix, "q", name.as_str(), &format!(":request:{id}"))
    }

    /// The field of lock key `key` in a shard's `pending` hash: the key as its hash tag
    /// encodes it.
    pub(crate) fn pending_field(key: &LockKey) -> std::borrow::Cow<'_, str> {
        hash_tag(key.as_str())
    }

    /// How the scripts name the sorted set that holds `set` (see the prelude's `SETS`).
    pub(crate) fn set_name(set: JobSet) -> &'static str {
        match set {
            JobSet::Waiting => "delayed",
            JobSet::InFlight => "inflight",
            JobSet::Dead => "dead",
            JobSet::Done => "done",
        }
    }
}

#[cfg(test)]
mod tests;
