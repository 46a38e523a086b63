//! A gate's items shared out over sessions of one model: one worker thread per session, each taking the next item
//! in order and running it batch 1, so how the items are shared out changes no result.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::run::decoder::Decoder;
use crate::run::runtime::Provider;
use crate::run::sessions;

/// `decoder` and replicas of it (sessions of their own, same options): `sessions` of them, else one a core up to
/// four; never more than there are items.
pub fn decoders(decoder: &Arc<Decoder>, items: usize, provider: Provider, sessions: Option<usize>) -> Result<Vec<Arc<Decoder>>> {
    let cores = || std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    let n = sessions.unwrap_or_else(cores).max(1).min(items.max(1));
    let mut all = vec![decoder.clone()];
    for _ in 1..n {
        all.push(sessions::decoder_replica(&decoder.model, provider)?);
    }
    Ok(all)
}

/// `work` on every item, one worker per session of `sessions`. A result that `stops` keeps the items after it from
/// starting (those already under way finish). Each item's result, in the items' order; `None` past a stop.
pub fn share_out<S: Sync, I: Sync, R: Send>(
    sessions: &[S],
    items: &[I],
    work: impl Fn(&S, &I) -> R + Sync,
    stops: impl Fn(&R) -> bool + Sync,
) -> Vec<Option<R>> {
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    // The first item (in order) whose result stops the run: the workers start nothing after it.
    let stop_at = AtomicUsize::new(usize::MAX);
    std::thread::scope(|s| {
        for session in sessions {
            let (slots, next, stop_at, work, stops) = (&slots, &next, &stop_at, &work, &stops);
            s.spawn(move || {
                while let Some(i) = Some(next.fetch_add(1, Relaxed)).filter(|&i| i < items.len()) {
                    if i > stop_at.load(Relaxed) {
                        break;
                    }
                    let r = work(session, &items[i]);
                    if stops(&r) {
                        stop_at.fetch_min(i, Relaxed);
                    }
                    *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                }
            });
        }
    });
    slots.into_iter().map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_items_order_and_nothing_starts_past_a_stop() {
        let items: Vec<usize> = (0..200).collect();
        let all = share_out(&[(), (), ()], &items, |_, &i| i * 2, |_| false);
        assert_eq!(all, items.iter().map(|&i| Some(i * 2)).collect::<Vec<_>>());
        let stopped = share_out(&[(), ()], &items, |_, &i| i, |&r| r == 50);
        assert_eq!(stopped[..=50], items[..=50].iter().map(|&i| Some(i)).collect::<Vec<_>>()[..]);
        // Workers may have taken an item or two past the stop before they saw it, never more than one each.
        let past = stopped[51..].iter().filter(|r| r.is_some()).count();
        assert!(past <= 2, "{past} items ran past the stop");
        assert!(share_out(&[(), ()], &[] as &[usize], |_, &i| i, |_| false).is_empty());
    }
}
