//! The accuracy gate's scoring on a package: a task's requests through ONNX Runtime, efficiently. One forward pass
//! per shared context, continuations run on its KV cache, only the continuation positions' logits are read,
//! log-softmax is computed here in f32, batch 1 always. What comes out ([`Scored`]) is judged by [`crate::accuracy::gate`].

use crate::accuracy::scoring::{self, Scored};
use crate::accuracy::task::{self, Item, ItemKind, Task};
use crate::error::{Error, Result};
use crate::feed::tokenizer::TextTokenizer;
use crate::judge::finite::{self, ExpectedVocab, NonFinite, VocabMismatch};
use crate::numeric::argmax;
use crate::run::runtime::{Decoder, StepInput};

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

/// Scores every item on `decoder` (token-id decoders: the gate runs on text). Its logits rows must have
/// `config_vocab` entries when the package states it, and always cover every id a request reads.
pub fn score(
    decoder: &Decoder,
    task: &Task,
    items: &[Item],
    tokenizer: &TextTokenizer,
    eos: &[i64],
    config_vocab: Option<usize>,
) -> Result<Scoring> {
    let expected = ExpectedVocab { golden: None, config: config_vocab, largest_id: largest_id(items) };
    let mut scored = Vec::with_capacity(items.len());
    for it in items {
        match score_item(decoder, task, it, tokenizer, eos, &expected).map_err(|e| e.context(format!("document {}", it.doc)))? {
            Ok(s) => scored.push(s),
            Err(why) => return Ok(Scoring { scored, stopped: Some((it.doc, why)) }),
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

fn score_item(
    decoder: &Decoder,
    task: &Task,
    item: &Item,
    tokenizer: &TextTokenizer,
    eos: &[i64],
    expected: &ExpectedVocab,
) -> Result<std::result::Result<Scored, Unjudgeable>> {
    match &item.kind {
        ItemKind::MultipleChoice { context_ids, continuations, .. } => {
            // One pass over the shared context; its last row predicts every continuation's first token.
            let empty = decoder.new_cache()?;
            let (ctx, cache) = decoder.forward(StepInput::Ids(context_ids.clone()), &empty, 1)?;
            if let Err(why) = judgeable(ctx.last(), 0, expected) {
                return Ok(Err(why));
            }
            let mut out = Vec::with_capacity(continuations.len());
            for cont in continuations {
                let (ll, _) = if cont.len() == 1 {
                    scoring::continuation_loglik([ctx.last()], cont)
                } else {
                    let rows = cont.len() - 1;
                    let (more, _) = decoder.forward(StepInput::Ids(cont[..rows].to_vec()), &cache, rows)?;
                    if let Some(nf) = finite::row(&more.logits, 1) {
                        return Ok(Err(Unjudgeable::NonFinite(nf)));
                    }
                    scoring::continuation_loglik(std::iter::once(ctx.last()).chain((0..rows).map(|i| more.row(i))), cont)
                };
                out.push(ll);
            }
            Ok(Ok(Scored::Choices(out)))
        }
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
            Ok(Ok(Scored::Answer(task::extract_answer(task.spec.answer_regex.as_deref(), task::cut_at_stop(&text, &kw.until)))))
        }
    }
}
