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
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Result, bail};
use crate::run::decoder::Decoder;
use crate::run::encoder_session::Encoder;
use crate::run::runtime::{self, Provider};

/// A decoder session, shared: `Session::run` needs `&mut`, so callers take turns.
pub fn decoder(model: &Path, provider: Provider) -> Result<Arc<Decoder>> {
    match shared(model, provider, || Ok(Loaded::Decoder(Arc::new(Decoder::load(model, provider)?))))? {
        Loaded::Decoder(d) => Ok(d),
        Loaded::Encoder(_) => bail!("{}: already loaded as an encoder, not a decoder", model.display()),
    }
}

/// A decoder session of its own, outside the shared cache (dropped with the last handle): a second worker's, so two
/// threads can run the same model at once (`Session::run` takes `&mut`). Same options, so the same results.
pub fn decoder_replica(model: &Path, provider: Provider) -> Result<Arc<Decoder>> {
    Ok(Arc::new(Decoder::load(model, provider)?))
}

/// Any other session of a package (embedding, vision or audio encoder), shared like decoders.
pub fn encoder(model: &Path, provider: Provider) -> Result<Arc<Encoder>> {
    match shared(model, provider, || Ok(Loaded::Encoder(Arc::new(Encoder::load(model, provider)?))))? {
        Loaded::Encoder(e) => Ok(e),
        Loaded::Decoder(_) => bail!("{}: already loaded as a decoder, not an encoder", model.display()),
    }
}

/// How this process's session cache has been used so far, and its cap (`MOBIUS_MAX_SESSIONS`); `None` before
/// ONNX Runtime is loaded.
pub fn session_counts() -> Option<(Counts, usize)> {
    runtime::loaded_library()?;
    let cache = process_cache().lock().unwrap_or_else(|p| p.into_inner());
    Some((cache.counts(), cache.cap()))
}

/// A loaded session of either kind (a model file is one or the other).
#[derive(Clone)]
enum Loaded {
    Decoder(Arc<Decoder>),
    Encoder(Arc<Encoder>),
}

impl Shared for Loaded {
    fn in_use(&self) -> bool {
        match self {
            Loaded::Decoder(d) => d.in_use(),
            Loaded::Encoder(e) => e.in_use(),
        }
    }
}

/// Drops every session of the process's cache (those still held elsewhere live on with their holders): ONNX
/// Runtime then writes the profiles of the profiled ones ([`crate::run::placement`]). Returns how many it held.
pub fn clear() -> usize {
    let dropped = process_cache().lock().unwrap_or_else(|p| p.into_inner()).clear();
    dropped.len()
}

/// The process's cache, with the cap its settings give.
fn process_cache() -> &'static Mutex<SessionCache<(PathBuf, Provider), Loaded>> {
    static CACHE: OnceLock<Mutex<SessionCache<(PathBuf, Provider), Loaded>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(SessionCache::new(runtime::settings().max_sessions)))
}

/// The shared session of `model` on `provider`, made by `make` the first time anyone asks (or again after the
/// cache dropped it to stay under its cap). ONNX Runtime is loaded first: a library that will not load is never a
/// model's error.
fn shared(model: &Path, provider: Provider, make: impl FnOnce() -> Result<Loaded>) -> Result<Loaded> {
    runtime::load()?;
    let (cell, dropped) = process_cache().lock().unwrap_or_else(|p| p.into_inner()).cell(&(model.to_path_buf(), provider));
    drop(dropped);
    cell.get_or_init(make).clone()
}

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
pub type Cell<V> = Arc<OnceLock<Result<V>>>;

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

    /// Every entry, removed (for the caller to drop after releasing its lock).
    pub fn clear(&mut self) -> Vec<Cell<V>> {
        self.counts.dropped += self.entries.len();
        self.entries.drain().map(|(_, (cell, _))| cell).collect()
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
