//! The accuracy gate's scoring on a package: a task's requests through ONNX Runtime, efficiently. One forward pass
//! per shared context; the continuations run on its KV cache, each distinct run of fed tokens once (a choice whose
//! tokens begin another's reads that one's rows); only the continuation positions' logits are read; log-softmax is
//! computed here in f32; batch 1 always; the items are shared out to one worker per session. What comes out
//! ([`Scored`]) is judged by [`crate::accuracy::gate`].

use std::sync::Arc;

use crate::accuracy::answer::{cut_at_stop, extract_answer};
use crate::accuracy::scoring::{self, Scored};
use crate::accuracy::task::{Item, ItemKind, Task};
use crate::error::{Error, Result};
use crate::feed::tokenizer::TextTokenizer;
use crate::judge::finite::{self, ExpectedVocab, NonFinite, VocabMismatch};
use crate::run::decoder::{Decoder, StepInput, StepOutput};
use mobius_numeric::argmax;

/// What scoring a task gave: every item's score, or the item where the package's logits could no longer be judged
/// (scoring stops there: nothing after it can be).
pub struct Scoring {
    pub scored: Vec<Scored>,
    /// The document whose logits could not be judged, and why.
    pub stopped: Option<(usize, Unjudgeable)>,
}

/// Logits the gate cannot score: a vocabulary of another size (checked first: ids past the end read as NaN), then
/// values that are not numbers.
pub enum Unjudgeable {
    Vocab(VocabMismatch),
    NonFinite(NonFinite),
}

/// How a multiple-choice item's log-likelihoods are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// lm-eval's own requests, one forward pass over context + continuation per choice from an empty cache: the
    /// measure the cached scoring is held to (`cargo xtask bench`'s gate section and the tests compare the two).
    Uncached,
    /// The context once, each continuation from its KV cache, shared runs of fed tokens once.
    Cached,
}

/// Scores every item on `decoders` (token-id decoders: the gate runs on text), one worker per decoder (each its own
/// session of the same model: items are independent and run batch 1, so how they are shared out changes nothing).
/// Its logits rows must have `config_vocab` entries when the package states it, and always cover every id a
/// request reads.
pub fn score(
    decoders: &[Arc<Decoder>],
    task: &Task,
    items: &[Item],
    tokenizer: &TextTokenizer,
    eos: &[i64],
    config_vocab: Option<usize>,
    strategy: Strategy,
) -> Result<Scoring> {
    if decoders.is_empty() {
        return Err(Error::new("the gate needs a decoder to score on"));
    }
    let expected = ExpectedVocab { golden: None, config: config_vocab, largest_id: largest_id(items) };
    let results = crate::run::workers::share_out(
        decoders,
        items,
        |decoder, it| {
            score_item(decoder, task, it, tokenizer, eos, &expected, strategy).map_err(|e| e.context(format!("document {}", it.doc)))
        },
        |r| !matches!(r, Ok(Ok(_))),
    );
    let mut scored = Vec::with_capacity(items.len());
    for (it, slot) in items.iter().zip(results) {
        match slot {
            Some(r) => match r? {
                Ok(s) => scored.push(s),
                Err(why) => return Ok(Scoring { scored, stopped: Some((it.doc, why)) }),
            },
            None => return Err(Error::new(format!("document {}: not scored (a worker stopped early)", it.doc))),
        }
    }
    Ok(Scoring { scored, stopped: None })
}

/// The largest token id any request feeds or scores.
fn largest_id(items: &[Item]) -> Option<i64> {
    items.iter().flat_map(|it| it.sequences().into_iter().flatten().copied().max()).max()
}

/// A row's vocabulary, then its values.
fn judgeable(row: &[f32], step: usize, expected: &ExpectedVocab) -> std::result::Result<(), Unjudgeable> {
    if let Some(v) = expected.check(row.len()) {
        return Err(Unjudgeable::Vocab(v));
    }
    finite::row(row, step).map_or(Ok(()), |nf| Err(Unjudgeable::NonFinite(nf)))
}

/// [`judgeable`] for the first row of a forward call's output (its vocabulary and values), then the rest's values.
fn judgeable_rows(out: &StepOutput, expected: &ExpectedVocab) -> std::result::Result<(), Unjudgeable> {
    judgeable(out.row(0), 0, expected)?;
    finite::row(&out.logits, 1).map_or(Ok(()), |nf| Err(Unjudgeable::NonFinite(nf)))
}

fn score_item(
    decoder: &Decoder,
    task: &Task,
    item: &Item,
    tokenizer: &TextTokenizer,
    eos: &[i64],
    expected: &ExpectedVocab,
    strategy: Strategy,
) -> Result<std::result::Result<Scored, Unjudgeable>> {
    match &item.kind {
        ItemKind::MultipleChoice { context_ids, continuations, .. } => match strategy {
            Strategy::Cached => choices_cached(decoder, context_ids, continuations, expected),
            Strategy::Uncached => choices_uncached(decoder, context_ids, continuations, expected),
        },
        ItemKind::Generate { context_ids, .. } => {
            let kw = task.spec.generation_kwargs.as_ref().ok_or_else(|| Error::new("generate_until needs generation_kwargs"))?;
            let mut run = decoder.start(context_ids.len() + kw.max_gen_toks)?;
            let mut logits = decoder.advance(&mut run, StepInput::Ids(context_ids.clone()))?;
            let mut generated = Vec::new();
            for step in 0..kw.max_gen_toks {
                if let Err(why) = judgeable(logits, step, expected) {
                    return Ok(Err(why));
                }
                let next = argmax(logits) as i64;
                if eos.contains(&next) {
                    break;
                }
                generated.push(next);
                let text = tokenizer.decode(&generated);
                if kw.until.iter().any(|s| !s.is_empty() && text.contains(s.as_str())) {
                    break;
                }
                logits = decoder.advance_token(&mut run, next)?;
            }
            let text = tokenizer.decode(&generated);
            Ok(Ok(Scored::Answer(extract_answer(task.spec.answer_regex.as_deref(), cut_at_stop(&text, &kw.until)))))
        }
    }
}

/// One pass over the shared context, extended by the tokens every continuation feeds first (" 2" of " 24", " 27" and
/// " 21": lm-eval too feeds them with the context), whose rows predict each continuation's first tokens; then what
/// each continuation feeds beyond that (all but its last token) from that pass's cache, each distinct run once: a
/// run that begins another reads the longer one's rows, which see the same tokens before them.
fn choices_cached(
    decoder: &Decoder,
    context_ids: &[i64],
    continuations: &[Vec<i64>],
    expected: &ExpectedVocab,
) -> Result<std::result::Result<Scored, Unjudgeable>> {
    let fed = |c: &Vec<i64>| c[..c.len().saturating_sub(1)].to_vec();
    let feeds: Vec<Vec<i64>> = continuations.iter().map(fed).collect();
    // The longest run every multi-token continuation feeds first (a one-token continuation reads the context's row).
    let mut common: Vec<i64> = feeds.iter().find(|f| !f.is_empty()).cloned().unwrap_or_default();
    for f in feeds.iter().filter(|f| !f.is_empty()) {
        let n = common.iter().zip(f).take_while(|(a, b)| a == b).count();
        common.truncate(n);
    }
    let first: Vec<i64> = context_ids.iter().chain(&common).copied().collect();
    let empty = decoder.new_cache()?;
    // Rows: the context's last position, then each common token's.
    let (head, cache) = decoder.forward(StepInput::Ids(first), &empty, common.len() + 1)?;
    if let Err(why) = judgeable_rows(&head, expected) {
        return Ok(Err(why));
    }
    // The runs to make past the common tokens: those no other continuation's run extends.
    let mut runs: Vec<Vec<i64>> = Vec::new();
    for f in feeds.iter().filter(|f| f.len() > common.len()).map(|f| f[common.len()..].to_vec()) {
        if runs.iter().any(|r| r.starts_with(&f)) {
            continue;
        }
        runs.retain(|r| !f.starts_with(r));
        runs.push(f);
    }
    let mut rows = Vec::with_capacity(runs.len());
    for r in &runs {
        let (more, _) = decoder.forward(StepInput::Ids(r.clone()), &cache, r.len())?;
        if let Some(nf) = finite::row(&more.logits, 1) {
            return Ok(Err(Unjudgeable::NonFinite(nf)));
        }
        rows.push(more);
    }
    let rows = &rows;
    let mut out = Vec::with_capacity(continuations.len());
    for (cont, f) in continuations.iter().zip(&feeds) {
        // Row i predicts cont[i]: the context's and the common tokens' rows first, then the run's.
        let shared = f.len().min(common.len()) + 1;
        let own = &f[f.len().min(common.len())..];
        let run = runs.iter().position(|r| !own.is_empty() && r.starts_with(own));
        let tail = run.map(|k| (0..own.len()).map(move |i| rows[k].row(i)));
        let (ll, _) = scoring::continuation_loglik((0..shared).map(|i| head.row(i)).chain(tail.into_iter().flatten()), cont);
        out.push(ll);
    }
    Ok(Ok(Scored::Choices(out)))
}

/// lm-eval's requests as they are: context + continuation in one pass per choice, from an empty cache, the
/// continuation's log-probabilities read from the rows that predict it.
fn choices_uncached(
    decoder: &Decoder,
    context_ids: &[i64],
    continuations: &[Vec<i64>],
    expected: &ExpectedVocab,
) -> Result<std::result::Result<Scored, Unjudgeable>> {
    let mut out = Vec::with_capacity(continuations.len());
    for cont in continuations {
        let whole: Vec<i64> = context_ids.iter().chain(cont).copied().collect();
        let empty = decoder.new_cache()?;
        // The rows at the context's last position and every continuation position but the last predict it.
        let (rows, _) = decoder.forward(StepInput::Ids(whole), &empty, cont.len() + 1)?;
        if let Err(why) = judgeable_rows(&rows, expected) {
            return Ok(Err(why));
        }
        let (ll, _) = scoring::continuation_loglik((0..cont.len()).map(|i| rows.row(i)), cont);
        out.push(ll);
    }
    Ok(Ok(Scored::Choices(out)))
}
