//! Fair shares of the engine's concurrency.
//!
//! Webhook attempts (network waits) and component invocations (CPU on the invoker's threads) draw
//! from separate pools, so plugins that compute or sleep up to their deadline never hold up
//! webhooks, and the other way round. One webhook subscription takes at most
//! [`MAX_IN_FLIGHT_PER_TARGET`] (a component has no cap of its own); and once half a pool is in
//! use, one installation, one plugin (across every store that installed it) and one store each
//! take at most a share of it, so slow
//! receivers or slow components of one plugin or one store always leave room to the others,
//! while a lone busy plugin can still use half the pool. Each lane of the work queue is read in
//! due order and an entry over its share waits for a later round.
//!
//! A made attempt (a webhook's request answered or failed, a component's invocation returned)
//! gives its place (and its shares) to the next one before its outcome is recorded, while its
//! queue entry stays in flight until then, so a target's next attempts run while the last ones
//! are written; the entries waiting for their record are bounded too (four per place in the
//! pools).
//!
//! Messages and the host's mail draw from a third pool, bounded ([`MESSAGE_CONCURRENCY`]) but not
//! shared out: they were never shared between stores, and a merchant's own sender carries them.

use foldhash::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// At most this many attempts to one webhook subscription run at once (a component's
/// invocations are bounded by the shares alone: `Pool::components`).
pub const MAX_IN_FLIGHT_PER_TARGET: usize = 8;
/// Messages and host mails sent at once.
pub const MESSAGE_CONCURRENCY: usize = 8;
/// One installation (its subscriptions and its component together) takes at most 1/4 of a pool.
const INSTALLATION_SHARE: usize = 4;
/// One plugin, over every store that installed it, takes at most 1/4 of a pool.
const PLUGIN_SHARE: usize = 4;
/// One store takes at most 1/2 of a pool.
const STORE_SHARE: usize = 2;

/// Which pool an attempt draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A signed POST to a webhook URL.
    Webhook,
    /// An invocation of an installed component.
    Component,
    /// A message through a merchant's sender, or a mail of the host.
    Message,
}

/// What one attempt counts against.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The pool it draws from.
    pub kind: Kind,
    /// The target (a subscription, a component; for a message, its queue entry).
    pub target: String,
    /// The installation behind it.
    pub installation: String,
    /// The plugin behind it.
    pub plugin: String,
    /// The store.
    pub store: String,
}

/// The most attempts in flight at once per target, installation, plugin and store, in one pool.
#[derive(Debug)]
struct Caps {
    target: usize,
    installation: usize,
    plugin: usize,
    store: usize,
}

impl Caps {
    /// The shares of a pool of `concurrency` places, a target taking at most `target`.
    fn of(concurrency: usize, target: usize) -> Self {
        Self {
            target,
            installation: (concurrency / INSTALLATION_SHARE).max(1),
            plugin: (concurrency / PLUGIN_SHARE).max(1),
            store: (concurrency / STORE_SHARE).max(1),
        }
    }

    /// No shares: only the pool's size bounds it.
    fn unshared(concurrency: usize) -> Self {
        Self {
            target: concurrency,
            installation: concurrency,
            plugin: concurrency,
            store: concurrency,
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    target: HashMap<String, usize>,
    installation: HashMap<String, usize>,
    plugin: HashMap<String, usize>,
    store: HashMap<String, usize>,
}

impl Counts {
    fn entries<'a>(
        &'a mut self,
        slot: &'a Slot,
    ) -> [(&'a mut HashMap<String, usize>, &'a String); 4] {
        [
            (&mut self.target, &slot.target),
            (&mut self.installation, &slot.installation),
            (&mut self.plugin, &slot.plugin),
            (&mut self.store, &slot.store),
        ]
    }

    fn fits(&self, slot: &Slot, caps: &Caps) -> bool {
        let used = |m: &HashMap<String, usize>, k: &str| m.get(k).copied().unwrap_or(0);
        used(&self.target, &slot.target) < caps.target
            && used(&self.installation, &slot.installation) < caps.installation
            && used(&self.plugin, &slot.plugin) < caps.plugin
            && used(&self.store, &slot.store) < caps.store
    }

    fn take(&mut self, slot: &Slot) {
        for (map, key) in self.entries(slot) {
            *map.entry(key.clone()).or_default() += 1;
        }
    }

    fn give_back(&mut self, slot: &Slot) {
        for (map, key) in self.entries(slot) {
            if let Some(n) = map.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

#[derive(Debug)]
struct Pool {
    permits: Arc<Semaphore>,
    size: usize,
    caps: Caps,
    /// At or below this many free places, the shares apply (half the pool).
    contended_below: usize,
}

impl Pool {
    /// The webhook attempts' pool: a subscription takes at most [`MAX_IN_FLIGHT_PER_TARGET`],
    /// whatever the pool's size (a receiver gets that many requests at once at most).
    fn webhooks(n: usize) -> Self {
        Self::shared(n, MAX_IN_FLIGHT_PER_TARGET)
    }

    /// The component invocations' pool: a component, its installation's one target in it, has
    /// no cap of its own. Its installation's, plugin's and store's shares bound it once half the
    /// pool is in use, so a lone busy component takes half the pool, as a lone busy plugin may.
    /// Invocations are this host's own CPU, not a receiver's to spare; and a made one waits for
    /// its record with its place given up, so more at once make bigger record batches.
    fn components(n: usize) -> Self {
        Self::shared(n, n)
    }

    fn shared(n: usize, target: usize) -> Self {
        let n = n.max(1);
        Self {
            permits: Arc::new(Semaphore::new(n)),
            size: n,
            caps: Caps::of(n, target),
            contended_below: n.div_ceil(2),
        }
    }

    fn unshared(n: usize) -> Self {
        let n = n.max(1);
        Self {
            permits: Arc::new(Semaphore::new(n)),
            size: n,
            caps: Caps::unshared(n),
            contended_below: 0,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    due_keys: HashSet<String>,
    /// Queue entries whose work ended (its outcome recorded) since the engine's round began
    /// ([`Fair::begin_round`]): a read of the queue during the round may still have found them.
    ended: HashSet<String>,
    webhooks: Counts,
    components: Counts,
    messages: Counts,
}

impl State {
    fn counts(&mut self, kind: Kind) -> &mut Counts {
        match kind {
            Kind::Webhook => &mut self.webhooks,
            Kind::Component => &mut self.components,
            Kind::Message => &mut self.messages,
        }
    }
}

/// The engine's concurrency: three pools and the attempts running in them.
#[derive(Debug)]
pub struct Fair {
    webhooks: Pool,
    components: Pool,
    messages: Pool,
    /// Queue entries in flight at most: running, or made and waiting for their outcome to be
    /// recorded ([`AWAITING_RECORD_FACTOR`] × the pools' places).
    max_keys: usize,
    state: Mutex<State>,
}

/// Queue entries in flight, running or waiting to be recorded, per place in the pools: a
/// made invocation frees its place at once ([`Ticket::finish_attempt`]), so that the next
/// invocations run while the last ones are recorded, and this bounds how far they may run
/// ahead of their records.
const AWAITING_RECORD_FACTOR: usize = 4;

/// Why an attempt did not start.
#[derive(Debug, PartialEq, Eq)]
pub enum NotStarted {
    /// This queue entry is being attempted already.
    InFlight,
    /// Its pool is full, or a share it counts against is used up.
    Busy,
}

/// A running attempt's place and its queue entry; [`Ticket::finish_attempt`] frees the place
/// (the attempt was made; its outcome waits to be recorded: the engine does so for component
/// invocations), dropping it frees both.
#[derive(Debug)]
pub struct Ticket {
    fair: Arc<Fair>,
    key: String,
    slot: Slot,
    /// The place in the pool, until the attempt is made.
    permit: Option<OwnedSemaphorePermit>,
}

impl Ticket {
    /// The attempt was made: its place in the pool and its shares go to the next attempt, while
    /// its queue entry stays in flight (not started again) until the ticket is dropped, once
    /// the outcome is recorded.
    pub fn finish_attempt(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.fair
                .lock()
                .counts(self.slot.kind)
                .give_back(&self.slot);
            drop(permit);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.fair.lock();
        if let Some(key) = state.due_keys.take(&self.key) {
            state.ended.insert(key);
        }
        if self.permit.is_some() {
            state.counts(self.slot.kind).give_back(&self.slot);
        }
    }
}

impl Fair {
    /// Pools of `webhooks` and `components` attempts at once (shared out), and of `messages`.
    pub fn new(webhooks: usize, components: usize, messages: usize) -> Arc<Self> {
        let (webhooks, components, messages) = (
            Pool::webhooks(webhooks),
            Pool::components(components),
            Pool::unshared(messages),
        );
        Arc::new(Self {
            max_keys: AWAITING_RECORD_FACTOR
                .saturating_mul(webhooks.size + components.size + messages.size),
            webhooks,
            components,
            messages,
            state: Mutex::default(),
        })
    }

    fn pool(&self, kind: Kind) -> &Pool {
        match kind {
            Kind::Webhook => &self.webhooks,
            Kind::Component => &self.components,
            Kind::Message => &self.messages,
        }
    }

    /// Free places in the pool of `kind`.
    pub fn free_in(&self, kind: Kind) -> usize {
        self.pool(kind).permits.available_permits()
    }

    /// Attempts running in the pool of `kind` (made ones, waiting to be recorded, not counted).
    pub fn in_flight_in(&self, kind: Kind) -> usize {
        let pool = self.pool(kind);
        pool.size - pool.permits.available_permits()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Free places in all pools together.
    pub fn free(&self) -> usize {
        [Kind::Webhook, Kind::Component, Kind::Message]
            .into_iter()
            .map(|kind| self.free_in(kind))
            .sum()
    }

    /// Queue entries in flight now: attempts running, or made and not recorded yet.
    pub fn in_flight(&self) -> usize {
        self.lock().due_keys.len()
    }

    /// A round of the engine begins: it reads the queue from here on, and forgets the entries
    /// whose work ended before (their outcome was committed, so no read from now on finds them).
    pub fn begin_round(&self) {
        self.lock().ended.clear();
    }

    /// Whether the queue entry at `key`, read in this round, is not to be started: it is being
    /// worked on, or its work ended during the round (the read found it before its outcome was
    /// committed, and the work is done). (The entries that end between two rounds are as many
    /// as were in flight at most.)
    pub fn is_taken(&self, key: &str) -> bool {
        let state = self.lock();
        state.due_keys.contains(key) || state.ended.contains(key)
    }

    /// Starts the attempt at queue entry `key` if its pool has room and its shares allow.
    pub fn try_start(self: &Arc<Self>, key: &str, slot: Slot) -> Result<Ticket, NotStarted> {
        let mut state = self.lock();
        if state.due_keys.contains(key) {
            return Err(NotStarted::InFlight);
        }
        if state.due_keys.len() >= self.max_keys {
            return Err(NotStarted::Busy); // Too many outcomes wait to be recorded.
        }
        let pool = self.pool(slot.kind);
        let counts = state.counts(slot.kind);
        let contended = pool.permits.available_permits() <= pool.contended_below;
        let fits = if contended {
            counts.fits(&slot, &pool.caps)
        } else {
            counts.target.get(&slot.target).copied().unwrap_or(0) < pool.caps.target
        };
        if !fits {
            return Err(NotStarted::Busy);
        }
        let permit = pool
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| NotStarted::Busy)?;
        counts.take(&slot);
        state.due_keys.insert(key.to_owned());
        Ok(Ticket {
            fair: self.clone(),
            key: key.to_owned(),
            slot,
            permit: Some(permit),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(kind: Kind, target: &str, installation: &str, plugin: &str, store: &str) -> Slot {
        Slot {
            kind,
            target: target.into(),
            installation: installation.into(),
            plugin: plugin.into(),
            store: store.into(),
        }
    }

    #[test]
    fn one_plugins_slow_targets_leave_most_of_the_pool_to_others() {
        let fair = Fair::new(64, 64, 8);
        let mut held = Vec::new();
        // 20 subscriptions of one installation, each with many due attempts.
        for sub in 0..20 {
            for n in 0..8 {
                let s = slot(
                    Kind::Webhook,
                    &format!("wh{sub}"),
                    "inst_a",
                    "slow",
                    "store_a",
                );
                if let Ok(t) = fair.try_start(&format!("due{sub}-{n}"), s) {
                    held.push(t);
                }
            }
        }
        assert_eq!(
            held.len(),
            32,
            "alone, an installation takes half the pool, then its share (a quarter) applies"
        );
        // Another store's delivery starts at once.
        let other = fair.try_start(
            "due-b",
            slot(Kind::Webhook, "wh_b", "inst_b", "p", "store_b"),
        );
        assert!(other.is_ok());
        // And the same entry cannot start twice.
        assert_eq!(
            fair.try_start(
                "due-b",
                slot(Kind::Webhook, "wh_b", "inst_b", "p", "store_b")
            )
            .err(),
            Some(NotStarted::InFlight)
        );
    }

    #[test]
    fn one_plugin_installed_in_many_stores_takes_a_quarter_and_components_never_block_webhooks() {
        let fair = Fair::new(64, 64, 8);
        let mut held = Vec::new();
        for store in 0..8 {
            for n in 0..8 {
                let s = slot(
                    Kind::Component,
                    &format!("inst{store}"),
                    &format!("inst{store}"),
                    "sleeper",
                    &format!("store{store}"),
                );
                if let Ok(t) = fair.try_start(&format!("due{store}-{n}"), s) {
                    held.push(t);
                }
            }
        }
        assert_eq!(
            held.len(),
            32,
            "one plugin takes at most half the component pool"
        );
        assert_eq!(fair.in_flight(), 32);
        let webhook = fair.try_start("due-w", slot(Kind::Webhook, "wh", "inst_w", "w", "store0"));
        assert!(webhook.is_ok(), "webhooks draw from their own pool");
        drop(held);
        assert_eq!(fair.in_flight(), 1, "dropping a ticket frees its place");
        assert_eq!(fair.free(), 127 + MESSAGE_CONCURRENCY);
    }

    #[test]
    fn a_lone_component_takes_half_its_pool_where_a_subscription_takes_eight() {
        let fair = Fair::new(64, 64, 8);
        let start = |kind: Kind, target: &str| {
            (0..64)
                .filter_map(|n| {
                    let s = slot(kind, target, target, "busy", "store_a");
                    fair.try_start(&format!("{target}-due{n}"), s).ok()
                })
                .collect::<Vec<_>>()
        };
        let components = start(Kind::Component, "inst_c");
        assert_eq!(
            components.len(),
            32,
            "a component has no cap of its own: its shares apply once half the pool is used"
        );
        let webhooks = start(Kind::Webhook, "wh_1");
        assert_eq!(
            webhooks.len(),
            MAX_IN_FLIGHT_PER_TARGET,
            "a receiver's requests at once"
        );
    }

    #[test]
    fn an_entry_whose_work_ended_during_a_round_is_not_started_again_in_it() {
        let fair = Fair::new(4, 4, 4);
        let s = slot(Kind::Webhook, "wh", "inst", "plugin", "store");
        fair.begin_round();
        let ticket = fair.try_start("due1", s).expect("starts");
        assert!(fair.is_taken("due1"), "in flight");
        // Its outcome is recorded (and the ticket dropped) while the round reads the queue,
        // which may have found the entry before that commit.
        drop(ticket);
        assert!(
            fair.is_taken("due1"),
            "ended during the round: not started again"
        );
        assert!(!fair.is_taken("due2"));
        fair.begin_round();
        assert!(
            !fair.is_taken("due1"),
            "the next round's reads cannot find it: forgotten"
        );
    }

    #[test]
    fn a_made_attempt_frees_its_place_but_its_entry_stays_in_flight_until_recorded() {
        let fair = Fair::new(64, 4, 4);
        let one_target = |n: usize| {
            let s = slot(Kind::Webhook, "wh", "inst", "plugin", "store");
            fair.try_start(&format!("due{n}"), s)
        };
        let max = MAX_IN_FLIGHT_PER_TARGET;
        let mut made: Vec<Ticket> = (0..max).map(|n| one_target(n).expect("starts")).collect();
        assert_eq!(
            one_target(max).err(),
            Some(NotStarted::Busy),
            "the target has all its attempts running"
        );
        for ticket in &mut made {
            ticket.finish_attempt();
        }
        assert_eq!(fair.in_flight_in(Kind::Webhook), 0, "made: none running");
        assert_eq!(fair.free_in(Kind::Webhook), 64);
        assert_eq!(fair.in_flight(), max, "their entries wait to be recorded");
        assert_eq!(
            one_target(0).err(),
            Some(NotStarted::InFlight),
            "an entry waiting to be recorded is not started again"
        );
        let next = one_target(max).expect("the next attempt takes a freed place");
        made[0].finish_attempt(); // Twice is once.
        assert_eq!(fair.in_flight_in(Kind::Webhook), 1);
        drop(next);
        drop(made);
        assert_eq!(fair.in_flight(), 0);
        assert_eq!(fair.free(), 72);
    }

    #[test]
    fn attempts_run_ahead_of_their_records_a_bounded_way() {
        let fair = Fair::new(2, 1, 1);
        let mut waiting = Vec::new();
        let mut n = 0;
        loop {
            let s = slot(Kind::Webhook, &format!("wh{n}"), "inst", "plugin", "store");
            match fair.try_start(&format!("due{n}"), s) {
                Ok(mut ticket) => {
                    ticket.finish_attempt();
                    waiting.push(ticket);
                }
                Err(busy) => {
                    assert_eq!(busy, NotStarted::Busy);
                    break;
                }
            }
            n += 1;
        }
        assert_eq!(waiting.len(), AWAITING_RECORD_FACTOR * (2 + 1 + 1));
        assert_eq!(
            fair.free_in(Kind::Webhook),
            2,
            "places are free, records are behind"
        );
        waiting.pop();
        let s = slot(Kind::Webhook, "again", "inst", "plugin", "store");
        assert!(fair.try_start("again", s).is_ok(), "a record made room");
    }

    #[test]
    fn once_half_the_pool_is_used_each_installation_gets_its_share() {
        let fair = Fair::new(64, 64, 8);
        let mut held = Vec::new();
        for inst in ["a", "b", "c", "d"] {
            for k in 0..40 {
                let s = slot(
                    Kind::Webhook,
                    &format!("{inst}{k}"),
                    inst,
                    inst,
                    &format!("s{inst}"),
                );
                if let Ok(t) = fair.try_start(&format!("{inst}-{k}"), s) {
                    held.push((inst, t));
                }
            }
        }
        let count = |i: &str| held.iter().filter(|(inst, _)| *inst == i).count();
        // a fills half the pool alone; b and c then take their share of 16; d gets nothing.
        assert_eq!(
            [count("a"), count("b"), count("c"), count("d")],
            [32, 16, 16, 0]
        );
    }

    #[test]
    fn messages_have_a_bounded_pool_of_their_own() {
        let fair = Fair::new(4, 4, MESSAGE_CONCURRENCY);
        let started: Vec<Ticket> = (0..20)
            .filter_map(|n| {
                let s = slot(Kind::Message, &format!("msg{n}"), "", "", "");
                fair.try_start(&format!("msg{n}"), s).ok()
            })
            .collect();
        assert_eq!(
            started.len(),
            MESSAGE_CONCURRENCY,
            "not shared out, only bounded"
        );
        assert_eq!(fair.free_in(Kind::Message), 0);
        assert_eq!(fair.in_flight_in(Kind::Message), MESSAGE_CONCURRENCY);
        let webhook = fair.try_start("due-w", slot(Kind::Webhook, "wh", "i", "p", "s"));
        assert!(webhook.is_ok(), "webhooks draw from their own pool");
    }

    #[test]
    fn a_store_takes_at_most_half_of_a_pool() {
        let fair = Fair::new(16, 16, 8);
        let started: Vec<Ticket> = (0..16)
            .filter_map(|n| {
                let s = slot(
                    Kind::Webhook,
                    &format!("wh{n}"),
                    &format!("i{n}"),
                    &format!("p{n}"),
                    "s",
                );
                fair.try_start(&format!("due{n}"), s).ok()
            })
            .collect();
        assert_eq!(started.len(), 8);
    }
}
