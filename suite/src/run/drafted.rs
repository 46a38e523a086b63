//! Greedy decoding checked against a draft (speculative decoding with a known text as the draft model): the
//! package itself decides every token, as [`generate::greedy_with`] does, but one forward call checks many of them.
//!
//! A call feeds the tokens the cache lacks, then the draft's guess of what follows, and reads one logits row per
//! guessed token plus one: row `j` is the package's next-token distribution after the guesses before `j`. Its greedy
//! choice is taken while it equals the guess; the first choice that differs (or the row after the last guess) is the
//! package's own next token, the cache is cut back to the chosen tokens, and the next call starts from there with a
//! new guess. So the tokens are the package's greedy tokens whatever the draft says; a good draft only makes them
//! cheaper (one call for a transcript the package agrees with, against one per token). What differs from the
//! step-by-step loop is the arithmetic's grouping: a row computed among several positions can differ from the
//! one-position step's in the last bits, which changes a choice only at an exact near-tie (the noise the gate's
//! paired statistics and margins already account for).
//!
//! Why it exists: an encoder-decoder package whose decoder recomputes the cross-attention keys and values from the
//! encoder's states at every call (mobius' Whisper does: 1,500 frames, ~9.4 GFLOP a call on Whisper base) pays that per
//! token step-by-step, and once per checked run here. The speech gate's draft is the reference's own transcript.

use crate::error::{Result, bail};
use crate::run::decoder::{Decoder, StepInput};
use crate::run::generate::{self, Generated, Suppress};
use crate::run::pipeline::Pipeline;
use mobius_numeric::Step;

/// A drafted run: the package's greedy tokens, as [`generate::greedy_with`] keeps them, and how many forward calls
/// they took.
#[derive(Debug, Clone, PartialEq)]
pub struct Drafted {
    pub generated: Generated,
    pub calls: usize,
}

/// Greedy decoding from `prompt`, up to `max_new_tokens`, stopping after an EOS token (kept) or at the first step whose
/// logits are not all finite (kept; the caller reports it), never choosing what `suppress` bans; `draft` is what the
/// output is expected to be. Token-id decoders only (decoder-only or encoder-decoder): an embedding pipeline is refused.
pub fn greedy_drafted(
    decoder: &Decoder,
    pipeline: &Pipeline,
    prompt: &[i64],
    max_new_tokens: usize,
    eos: &[i64],
    suppress: &Suppress,
    draft: &[i64],
) -> Result<Drafted> {
    if !pipeline.feeds_ids() {
        bail!("{}: drafted greedy decoding feeds token ids; this package's decoder takes embeddings", decoder.model.display());
    }
    generate::check_budget(max_new_tokens)?;
    let mut cache = decoder.new_cache_with(pipeline.context())?;
    // The tokens the cache does not hold yet: the prompt, then the last token chosen.
    let mut pending = prompt.to_vec();
    let (mut steps, mut chosen): (Vec<Step>, Vec<i64>) = (Vec::new(), Vec::new());
    let mut prefill_logits = None;
    let mut calls = 0;
    // The ids the package can choose: the graph's declared vocabulary, else the first call's rows.
    let mut vocab = decoder.io.vocab;
    while steps.len() < max_new_tokens {
        // Every guess gets a row and so does the token after them: at most the budget's rows.
        let guess = within(propose(&chosen, draft, max_new_tokens - steps.len() - 1), vocab);
        let mut input = pending.clone();
        input.extend_from_slice(guess);
        let (out, grown) = decoder.forward(StepInput::Ids(input), &cache, guess.len() + 1)?;
        calls += 1;
        vocab.get_or_insert(out.vocab as i64);
        prefill_logits.get_or_insert_with(|| out.row(0).to_vec());
        let mut agreed = 0;
        let mut done = false;
        for j in 0..=guess.len() {
            let step = generate::choose_step(out.row(j), steps.len(), suppress, Vec::new());
            let (next, finite) = (step.chosen, step.non_finite.is_none());
            steps.push(step);
            chosen.push(next);
            if !finite || eos.contains(&next) || steps.len() == max_new_tokens {
                done = true;
                break;
            }
            if guess.get(j) != Some(&next) {
                break;
            }
            agreed += 1;
        }
        if done {
            break;
        }
        // The cache keeps the positions of chosen tokens: what was pending and the guesses the package agreed with.
        let keep = cache.len + pending.len() + agreed;
        cache = if agreed == guess.len() { grown } else { decoder.truncate(&grown, keep)? };
        pending = vec![*chosen.last().expect("a step was taken")];
    }
    let tokens = chosen;
    let prefill_logits = prefill_logits.unwrap_or_default();
    Ok(Drafted { generated: Generated { tokens, steps, prefill_logits }, calls })
}

/// A guess up to its first id outside the vocabulary (`vocab` ids; none guessed while it is unknown): such an id can
/// never be the package's choice, and fed to the decoder it can fail the call (its embedding lookup is out of range,
/// or a negative index wraps), so a hostile draft would end a run the package itself would finish.
fn within(guess: &[i64], vocab: Option<i64>) -> &[i64] {
    let Some(v) = vocab else { return &[] };
    &guess[..guess.iter().position(|&t| !(0..v).contains(&t)).unwrap_or(guess.len())]
}

/// The draft's guess of what follows `chosen`, at most `max` tokens: where the draft holds the last three (else two,
/// else one) chosen tokens, what follows there (the occurrence nearest the output's own position); with none of them
/// in it (the package wrote a word the draft lacks), what follows at the same position, as after a substituted token.
pub fn propose<'d>(chosen: &[i64], draft: &'d [i64], max: usize) -> &'d [i64] {
    let from = |start: usize| &draft[start.min(draft.len())..draft.len().min(start.saturating_add(max))];
    for n in (1..=chosen.len().min(3)).rev() {
        let tail = &chosen[chosen.len() - n..];
        let nearest =
            draft.windows(n).enumerate().filter(|(_, w)| *w == tail).map(|(s, _)| s + n).min_by_key(|&end| end.abs_diff(chosen.len()));
        if let Some(end) = nearest {
            return from(end);
        }
    }
    from(chosen.len())
}

#[cfg(test)]
mod tests {
    use super::{propose, within};

    #[test]
    fn the_guess_follows_the_longest_matching_tail_nearest_the_outputs_position() {
        let draft = [10, 11, 12, 13, 11, 12, 14, 15];
        // Nothing chosen yet: the whole draft, up to `max`.
        assert_eq!(propose(&[], &draft, 100), &draft[..]);
        assert_eq!(propose(&[], &draft, 3), &[10, 11, 12]);
        // Agreeing so far: the rest, from the same place.
        assert_eq!(propose(&[10, 11, 12], &draft, 100), &[13, 11, 12, 14, 15]);
        // `11 12` is in the draft twice; the occurrence nearer the output's position 6 wins.
        assert_eq!(propose(&[10, 11, 12, 13, 99, 11, 12], &draft, 2), &[14, 15]);
        // A token the draft lacks: what follows at the same position, as after a substitution.
        assert_eq!(propose(&[10, 99], &draft, 3), &[12, 13, 11]);
        // Past the draft's end, or no room: nothing.
        assert!(propose(&[15], &draft, 5).is_empty());
        assert!(propose(&[10], &draft, 0).is_empty());
        assert!(propose(&[1, 2, 3, 4, 5, 6, 7, 8, 9], &draft, 4).is_empty());
    }

    #[test]
    fn a_guess_ends_before_an_id_the_vocabulary_lacks() {
        assert_eq!(within(&[1, 2, 9], Some(10)), &[1, 2, 9]);
        assert_eq!(within(&[1, 10, 3], Some(10)), &[1]);
        assert!(within(&[-1, 2], Some(10)).is_empty());
        assert!(within(&[1, 2], None).is_empty(), "nothing is guessed before the vocabulary is known");
    }
}
