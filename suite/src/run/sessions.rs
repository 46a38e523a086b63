//! The process's session cache: one session per (model file, execution provider), made on first use and shared
//! by the trials that use it, with at most a set number kept alive so memory stays bounded however many packages
//! a run covers.
//!
//! A session is never dropped while a trial holds it: when a new one would go past the cap, the least recently
//! asked-for session that nobody holds is dropped instead. With every session in use the cache goes past the cap
//! rather than wait; trials hold at most four sessions each (decoder, embedding, vision and audio encoders), so
//! the number alive stays under `cap + 4 x workers`.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, OnceLock};

use crate::error::Error;

/// What the cache holds: a value that can tell whether anyone besides the cache holds it.
pub trait Shared: Clone {
    fn in_use(&self) -> bool;
}

impl<T> Shared for Arc<T> {
    fn in_use(&self) -> bool {
        Arc::strong_count(self) > 1
    }
}

/// A value made once, on first use; later users wait for it and share it (or its error).
pub type Cell<V> = Arc<OnceLock<Result<V, Error>>>;

/// The cap from `MOBIUS_MAX_SESSIONS`, else 64: room for every package of a large case set, bounded all the same.
pub fn cap_from_env() -> Result<usize, Error> {
    parse_cap(std::env::var("MOBIUS_MAX_SESSIONS").ok().as_deref())
}

/// `MOBIUS_MAX_SESSIONS`: unset means 64; a whole number >= 1 is the cap; anything else is an error naming the
/// setting (a typo must not quietly run with another cap).
pub fn parse_cap(value: Option<&str>) -> Result<usize, Error> {
    match value.map(|v| (v, v.trim().parse::<usize>())) {
        None => Ok(64),
        Some((_, Ok(n))) if n > 0 => Ok(n),
        Some((v, _)) => Err(Error::new(format!("MOBIUS_MAX_SESSIONS={v:?}: expected a whole number of sessions, at least 1"))),
    }
}

/// How the cache has been used: sessions made, dropped to stay under the cap, and the most alive at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub made: usize,
    pub dropped: usize,
    pub peak_alive: usize,
}

pub struct SessionCache<K, V> {
    entries: HashMap<K, (Cell<V>, u64)>,
    tick: u64,
    cap: usize,
    counts: Counts,
}

impl<K: Hash + Eq + Clone, V: Shared> SessionCache<K, V> {
    pub fn new(cap: usize) -> Self {
        SessionCache { entries: HashMap::new(), tick: 0, cap: cap.max(1), counts: Counts::default() }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// The cell for `key` (new and empty the first time), marked as just used, and the cells dropped to make room
    /// (for the caller to drop after releasing its lock: dropping a session can take a while).
    pub fn cell(&mut self, key: &K) -> (Cell<V>, Vec<Cell<V>>) {
        self.tick += 1;
        let tick = self.tick;
        let made = &mut self.counts.made;
        let entry = self.entries.entry(key.clone()).or_insert_with(|| {
            *made += 1;
            (Arc::default(), 0)
        });
        entry.1 = tick;
        let cell = entry.0.clone();
        let dropped = self.evict(key);
        self.counts.peak_alive = self.counts.peak_alive.max(self.entries.len());
        (cell, dropped)
    }

    /// Drops least recently used entries nobody holds until the cache is within its cap (or none is left to drop).
    fn evict(&mut self, keep: &K) -> Vec<Cell<V>> {
        let mut out = Vec::new();
        while self.entries.len() > self.cap {
            let victim = self
                .entries
                .iter()
                .filter(|(k, (cell, _))| {
                    // Nobody is making or waiting for it (they hold a clone of the cell), and nobody holds the value.
                    *k != keep
                        && Arc::strong_count(cell) == 1
                        && cell.get().is_none_or(|r| r.as_ref().is_err() || r.as_ref().is_ok_and(|v| !v.in_use()))
                })
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone());
            let Some(k) = victim else { break };
            if let Some((cell, _)) = self.entries.remove(&k) {
                self.counts.dropped += 1;
                out.push(cell);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(cache: &mut SessionCache<&'static str, Arc<u32>>, key: &'static str, v: u32) -> Arc<u32> {
        let (cell, _) = cache.cell(&key);
        cell.get_or_init(|| Ok(Arc::new(v))).clone().unwrap()
    }

    #[test]
    fn the_cap_setting_is_a_positive_number_or_an_error_naming_it() {
        assert_eq!(parse_cap(None).unwrap(), 64);
        assert_eq!(parse_cap(Some(" 3 ")).unwrap(), 3);
        for bad in ["0", "-2", "lots", ""] {
            assert!(parse_cap(Some(bad)).unwrap_err().to_string().contains("MOBIUS_MAX_SESSIONS"), "{bad}");
        }
    }

    #[test]
    fn drops_the_least_recently_used_idle_session_past_the_cap() {
        let mut cache = SessionCache::new(2);
        drop(filled(&mut cache, "a", 1));
        drop(filled(&mut cache, "b", 2));
        drop(filled(&mut cache, "a", 1)); // a is now more recent than b
        drop(filled(&mut cache, "c", 3));
        assert_eq!(cache.counts(), Counts { made: 3, dropped: 1, peak_alive: 2 });
        assert!(cache.entries.contains_key("a") && cache.entries.contains_key("c") && !cache.entries.contains_key("b"));
        // b comes back as a new session.
        drop(filled(&mut cache, "b", 2));
        assert_eq!(cache.counts().made, 4);
    }

    #[test]
    fn never_drops_a_session_in_use_and_goes_past_the_cap_instead() {
        let mut cache = SessionCache::new(1);
        let a = filled(&mut cache, "a", 1);
        let b = filled(&mut cache, "b", 2);
        assert_eq!(cache.entries.len(), 2, "both are held, so neither may go");
        assert_eq!(cache.counts().dropped, 0);
        drop(a);
        let c = filled(&mut cache, "c", 3);
        assert_eq!((*b, *c), (2, 3));
        assert!(!cache.entries.contains_key("a"), "a was idle and the oldest");
        assert_eq!(cache.counts(), Counts { made: 3, dropped: 1, peak_alive: 2 });
    }

    #[test]
    fn a_session_being_made_is_not_dropped() {
        let mut cache: SessionCache<&str, Arc<u32>> = SessionCache::new(1);
        let (pending, _) = cache.cell(&"a"); // someone is making it: they hold the cell
        drop(filled(&mut cache, "b", 2));
        assert!(cache.entries.contains_key("a"));
        drop(pending);
        drop(filled(&mut cache, "c", 3));
        assert_eq!(cache.entries.keys().copied().collect::<Vec<_>>(), ["c"], "a (never made, nobody waiting) and b go");
    }
}
