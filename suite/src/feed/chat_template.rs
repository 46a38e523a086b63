//! A tokenizer's chat template, rendered as transformers 5.14.1 renders it (`apply_chat_template(...,
//! tokenize=False)`), so that an instruction-tuned model is fed the prompt it was tuned on.
//!
//! - **Where it comes from** (transformers' `_from_pretrained`): `tokenizer_config.json`'s `chat_template` (a string,
//!   or a list of `{name, template}`), overridden by `chat_template.jinja` beside it (the `default` one), with one more
//!   named template per `additional_chat_templates/<name>.jinja`. A name picks one of several; no name picks
//!   `default`. Unlike transformers, a name that is not among them is an error, not a template of its own text.
//! - **Its environment** (transformers' `_cached_compile_jinja_template`): Jinja2's sandbox with `trim_blocks`,
//!   `lstrip_blocks` and loop controls; `raise_exception(message)`; `strftime_now(format)` over the clock the caller
//!   gives; `tojson` as Python's `json.dumps` (`ensure_ascii=False`, `", "` and `": "`); the variables `messages`,
//!   `tools` and `documents` (none), `add_generation_prompt`, every special token the tokenizer's config names
//!   (`bos_token`, `eos_token`, Gemma's `boi_token`, ...), then the caller's extra arguments.
//! - **Python where templates call it**: printing `None`, `True`, a float, a list or a dict as Python's `str` does;
//!   `is sequence` true of strings and dicts as in Jinja2; `trim` and `str.strip()` with Python's whitespace; the
//!   string, dict and list methods real templates call ([`crate::feed::python_str::python_method`]).
//! - **continue_final_message**: transformers' tag algorithm, its checks and its trimming included.
//!
//! A construct the renderer does not have (an unknown tag such as `{% generation %}`, a Python method it lacks, a
//! `strftime_now` directive it lacks) is an error naming the template and the construct, never another string.

use std::collections::BTreeMap;
use std::path::Path;

use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, ErrorKind, UndefinedBehavior};
use serde_json::Value as Json;

use crate::error::{Error, Result};
use crate::feed::python_str::{py_is_space, python_method};

/// The tag transformers appends to the final message to find where it ends (`render_jinja_template`).
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// A tokenizer's chat template, and the special tokens it is rendered with.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatTemplate {
    /// Where it came from, for errors: `<dir>/chat_template.jinja`, `<dir>/tokenizer_config.json: chat_template`,
    /// with its name where it is one of several.
    pub origin: String,
    pub source: String,
    /// The tokenizer's special tokens by attribute (`bos_token`: `<bos>`): template variables.
    pub special_tokens: BTreeMap<String, String>,
}

/// How a conversation is rendered (transformers' keyword arguments).
#[derive(Debug, Clone, Default)]
pub struct Render {
    pub add_generation_prompt: bool,
    pub continue_final_message: bool,
    /// More template variables (lm-eval's `chat_template_args`, e.g. `enable_thinking`): they override the special
    /// tokens.
    pub extra: serde_json::Map<String, Json>,
    /// The clock `strftime_now` reads (transformers reads the local wall clock).
    pub now: Option<Civil>,
}

/// A civil date and time, as `datetime.now()` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

/// Why a conversation was not rendered: what transformers raises, by the class lm-eval tells apart.
#[derive(Debug, Clone, PartialEq)]
pub enum RenderError {
    /// The template raised a `jinja2.exceptions.TemplateError` (`raise_exception`, an undefined value used, a syntax
    /// error): lm-eval retries such a conversation without its system message.
    Template(String),
    /// transformers refused the call before or after rendering (its `ValueError`): an empty conversation,
    /// `continue_final_message` that cannot apply.
    Refused(String),
    /// The template's own Python failed another way (a `TypeError`: a string added to a list): raised through.
    Python(String),
    /// The template uses a construct the suite does not render (an unknown tag, a Python method it lacks).
    Unsupported(String),
}

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenderError::Template(m) | RenderError::Refused(m) | RenderError::Python(m) | RenderError::Unsupported(m) => f.write_str(m),
        }
    }
}

impl From<RenderError> for Error {
    fn from(e: RenderError) -> Error {
        Error::new(e.to_string())
    }
}

impl ChatTemplate {
    /// The chat template of the tokenizer in `dir` (`name`: one of several), as transformers picks it.
    pub fn load(dir: &Path, name: Option<&str>) -> Result<ChatTemplate> {
        let config_path = dir.join("tokenizer_config.json");
        let config_file = config_path.display().to_string();
        let config: serde_json::Map<String, Json> = match std::fs::read_to_string(&config_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| Error::new(format!("{config_file}: {e}")))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Map::new(),
            Err(e) => return Err(Error::new(format!("{config_file}: {e}"))),
        };
        // (name, origin, text): the config's, then the files', which take priority.
        let mut templates: Vec<(String, String, String)> = Vec::new();
        match config.get("chat_template") {
            None | Some(Json::Null) => {}
            Some(Json::String(t)) => templates.push(("default".into(), format!("{config_file}: chat_template"), t.clone())),
            Some(Json::Array(list)) => {
                for (i, item) in list.iter().enumerate() {
                    let field = |k: &str| item.get(k).and_then(Json::as_str).map(str::to_string);
                    let (Some(n), Some(t)) = (field("name"), field("template")) else {
                        return Err(Error::new(format!(
                            "{config_file}: chat_template[{i}]: expected {{\"name\": ..., \"template\": ...}}"
                        )));
                    };
                    templates.push((n.clone(), format!("{config_file}: chat_template {n:?}"), t));
                }
            }
            Some(other) => {
                return Err(Error::new(format!("{config_file}: chat_template is {other}, expected a string or a list of named templates")));
            }
        }
        let file = dir.join("chat_template.jinja");
        let mut from_files: Vec<(String, String, String)> = Vec::new();
        if file.is_file() {
            let text = std::fs::read_to_string(&file).map_err(|e| Error::new(format!("{}: {e}", file.display())))?;
            from_files.push(("default".into(), file.display().to_string(), text));
        }
        let extra_dir = dir.join("additional_chat_templates");
        if extra_dir.is_dir() {
            let mut named: Vec<_> = std::fs::read_dir(&extra_dir)
                .map_err(|e| Error::new(format!("{}: {e}", extra_dir.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
                .collect();
            named.sort();
            for p in named {
                let text = std::fs::read_to_string(&p).map_err(|e| Error::new(format!("{}: {e}", p.display())))?;
                let n = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
                from_files.push((n, p.display().to_string(), text));
            }
        }
        // transformers: template files, where there are any, replace the config's templates altogether.
        if !from_files.is_empty() {
            templates = from_files;
        }
        let names = || templates.iter().map(|(n, ..)| n.as_str()).collect::<Vec<_>>().join(", ");
        let wanted = name.unwrap_or("default");
        let Some((_, origin, source)) = templates.iter().find(|(n, ..)| n == wanted).cloned() else {
            return Err(Error::new(match (templates.is_empty(), name) {
                (true, _) => format!(
                    "{}: the tokenizer has no chat template (no chat_template.jinja, no `chat_template` in tokenizer_config.json)",
                    dir.display()
                ),
                (false, Some(n)) => format!("{}: the tokenizer has no chat template named {n:?} (it has: {})", dir.display(), names()),
                (false, None) => format!(
                    "{}: the tokenizer has several chat templates and none named \"default\" (it has: {}): name one",
                    dir.display(),
                    names()
                ),
            }));
        };
        Ok(ChatTemplate { origin, source, special_tokens: special_tokens(&config) })
    }

    /// The template in `file` (transformers' `chat_template=` argument) with the special tokens of the tokenizer in
    /// `dir`.
    pub fn from_file(dir: &Path, file: &Path) -> Result<ChatTemplate> {
        let source = std::fs::read_to_string(file).map_err(|e| Error::new(format!("{}: {e}", file.display())))?;
        let config_path = dir.join("tokenizer_config.json");
        let text = std::fs::read_to_string(&config_path).map_err(|e| Error::new(format!("{}: {e}", config_path.display())))?;
        let config = serde_json::from_str(&text).map_err(|e| Error::new(format!("{}: {e}", config_path.display())))?;
        Ok(ChatTemplate { origin: file.display().to_string(), source, special_tokens: special_tokens(&config) })
    }

    /// `messages` (the JSON text of a list of `{role, content, ...}`, its keys kept in their order as Python's dicts
    /// keep them) rendered with `how`.
    pub fn render(&self, messages: &str, how: &Render) -> std::result::Result<String, RenderError> {
        let parsed: Value = serde_json::from_str(messages)
            .map_err(|e| RenderError::Refused(format!("{}: the conversation is not JSON: {e}", self.origin)))?;
        if parsed.kind() != ValueKind::Seq {
            return Err(RenderError::Refused(format!("{}: the conversation is {messages}, expected a list of messages", self.origin)));
        }
        let mut chat: Vec<Value> = parsed.try_iter().map_err(|e| RenderError::Refused(e.to_string()))?.collect();
        if chat.is_empty() {
            return Err(RenderError::Refused("Cannot apply chat template to an empty conversation. Provide at least one message.".into()));
        }
        if how.continue_final_message && how.add_generation_prompt {
            return Err(RenderError::Refused(
                "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you \
                 want the model to continue the final message, and add_generation_prompt when you want to add a header \
                 that will prompt it to generate a new assistant message instead."
                    .into(),
            ));
        }
        let mut final_message = None;
        if how.continue_final_message {
            let last = chat.pop().expect("not empty");
            let (tagged, before) = tag_final(&last).ok_or_else(|| {
                RenderError::Refused("continue_final_message is set but the final message has no text content to continue".into())
            })?;
            chat.push(tagged);
            final_message = Some(before);
            if !self.source.contains("content") {
                return Err(RenderError::Refused(format!(
                    "continue_final_message is set but the chat template ({}) does not use the final message's content",
                    self.origin
                )));
            }
        }
        let env = environment(how.now);
        let template = env.template_from_named_str(&self.origin, &self.source).map_err(|e| self.template_error(&e))?;
        let mut vars: BTreeMap<String, Value> = BTreeMap::new();
        for (k, v) in &self.special_tokens {
            vars.insert(k.clone(), Value::from(v.as_str()));
        }
        for (k, v) in &how.extra {
            vars.insert(k.clone(), Value::from_serialize(v));
        }
        vars.insert("messages".into(), Value::from(chat));
        vars.insert("tools".into(), Value::from(()));
        vars.insert("documents".into(), Value::from(()));
        vars.insert("add_generation_prompt".into(), Value::from(how.add_generation_prompt));
        let rendered = template.render(Value::from_iter(vars)).map_err(|e| self.template_error(&e))?;
        let Some(final_message) = final_message else { return Ok(rendered) };
        let tag = CONTINUE_TAG.trim_end();
        if !rendered.contains(final_message.trim_matches(py_is_space)) || !rendered.contains(tag) {
            return Err(RenderError::Refused(
                "continue_final_message is set but the final message does not appear in the chat after applying the chat \
                 template! This can happen if the chat template deletes portions of the final message. Please verify the \
                 chat template and final message in your chat to ensure they are compatible."
                    .into(),
            ));
        }
        let at = rendered.rfind(tag).expect("contains the tag");
        Ok(if rendered[at..].starts_with(CONTINUE_TAG) {
            rendered[..at].to_string()
        } else {
            rendered[..at].trim_end_matches(py_is_space).to_string()
        })
    }

    /// A render error of minijinja's, as the class Python raises for it.
    fn template_error(&self, e: &minijinja::Error) -> RenderError {
        let at = e.line().map(|l| format!(" (line {l})")).unwrap_or_default();
        let detail = e.detail().map(str::to_string).unwrap_or_else(|| e.to_string());
        let unsupported =
            |what: &str| RenderError::Unsupported(format!("{}{at}: the suite cannot render this construct: {what}", self.origin));
        match e.kind() {
            ErrorKind::UnknownMethod | ErrorKind::UnknownFilter | ErrorKind::UnknownTest => unsupported(&detail),
            ErrorKind::SyntaxError if detail.starts_with("unknown statement") => unsupported(&detail),
            ErrorKind::InvalidOperation if detail.starts_with(UNSUPPORTED) => unsupported(&detail[UNSUPPORTED.len()..]),
            ErrorKind::InvalidOperation if detail.starts_with(RAISED) => {
                RenderError::Template(format!("{}{at}: {}", self.origin, &detail[RAISED.len()..]))
            }
            // Jinja2's TemplateSyntaxError and UndefinedError (an unknown function is an undefined name there).
            ErrorKind::SyntaxError | ErrorKind::UndefinedError | ErrorKind::UnknownFunction => {
                RenderError::Template(format!("{}{at}: {detail}", self.origin))
            }
            _ => RenderError::Python(format!("{}{at}: {detail}", self.origin)),
        }
    }
}

/// A conversation as the JSON text [`ChatTemplate::render`] takes: `{"role", "content"}` per turn, in that order (the
/// order transformers' dicts keep, which a template that prints a message shows).
pub fn messages_json<'a>(turns: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let items: Vec<String> = turns
        .into_iter()
        .map(|(role, content)| format!(r#"{{"role": {}, "content": {}}}"#, Json::from(role), Json::from(content)))
        .collect();
    format!("[{}]", items.join(", "))
}

/// The final message with transformers' tag appended to its content (a string, or the last block of a list that has
/// a `text`), its keys in their order; and the text before the tag. `None`: it has no such content.
fn tag_final(message: &Value) -> Option<(Value, String)> {
    let with = |map: &Value, key: &str, new: Value| -> Option<Value> {
        let keys: Vec<Value> = map.try_iter().ok()?.collect();
        Some(Value::from_iter(keys.into_iter().map(|k| {
            let v = if k.as_str() == Some(key) { new.clone() } else { map.get_item(&k).unwrap_or_default() };
            (k, v)
        })))
    };
    let content = message.get_attr("content").ok()?;
    if let Some(text) = content.as_str() {
        return Some((with(message, "content", Value::from(format!("{text}{CONTINUE_TAG}")))?, text.to_string()));
    }
    if content.kind() != ValueKind::Seq {
        return None;
    }
    let mut blocks: Vec<Value> = content.try_iter().ok()?.collect();
    let at = blocks.iter().rposition(|b| b.kind() == ValueKind::Map && b.get_attr("text").is_ok_and(|t| !t.is_undefined()))?;
    let text = blocks[at].get_attr("text").ok()?.as_str()?.to_string();
    blocks[at] = with(&blocks[at], "text", Value::from(format!("{text}{CONTINUE_TAG}")))?;
    Some((with(message, "content", Value::from(blocks))?, text))
}

/// The prefix of an error the environment raises for a construct it does not render as Python would.
const UNSUPPORTED: &str = "unsupported: ";

/// The prefix of the error `raise_exception` raises.
const RAISED: &str = "raise_exception: ";

fn unsupported(what: String) -> minijinja::Error {
    minijinja::Error::new(ErrorKind::InvalidOperation, format!("{UNSUPPORTED}{what}"))
}

/// transformers' `special_tokens_map` of a tokenizer config: each of the standard attributes it sets, and every
/// other `*_token` key with a string (or an added token's `content`), and `extra_special_tokens` given as a dict.
fn special_tokens(config: &serde_json::Map<String, Json>) -> BTreeMap<String, String> {
    let text = |v: &Json| match v {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content").and_then(Json::as_str).map(str::to_string),
        _ => None,
    };
    let mut out = BTreeMap::new();
    for (k, v) in config {
        if k.ends_with("_token")
            && let Some(t) = text(v)
        {
            out.insert(k.clone(), t);
        }
    }
    if let Some(Json::Object(extra)) = config.get("extra_special_tokens") {
        for (k, v) in extra {
            if let Some(t) = text(v) {
                out.insert(k.clone(), t);
            }
        }
    }
    out
}

/// transformers' Jinja environment, in minijinja.
fn environment(now: Option<Civil>) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env.set_unknown_method_callback(python_method);
    env.set_formatter(|out, _state, value| {
        if value.is_undefined() {
            return Ok(());
        }
        out.write_str(&py_str(value)?).map_err(|e| minijinja::Error::new(ErrorKind::WriteFailure, e.to_string()))
    });
    env.add_function("raise_exception", |message: String| -> std::result::Result<Value, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("{RAISED}{message}")))
    });
    env.add_function("strftime_now", move |format: String| -> std::result::Result<String, minijinja::Error> {
        let now = now.ok_or_else(|| unsupported("strftime_now without a clock given to the renderer".into()))?;
        strftime(&format, now)
    });
    env.add_filter("tojson", tojson);
    // Jinja2's `trim`: `str(value).strip(chars)`, Python's whitespace by default.
    env.add_filter("trim", |v: Value, chars: Option<String>| -> std::result::Result<String, minijinja::Error> {
        let s = py_str(&v)?;
        Ok(match chars {
            Some(set) => s.trim_matches(|c| set.contains(c)).to_string(),
            None => s.trim_matches(py_is_space).to_string(),
        })
    });
    env.add_test("sequence", |v: &Value| matches!(v.kind(), ValueKind::Seq | ValueKind::String | ValueKind::Map | ValueKind::Bytes));
    env
}

/// Python's `str()` of a value, as Jinja2 prints it.
fn py_str(v: &Value) -> std::result::Result<String, minijinja::Error> {
    match v.kind() {
        ValueKind::String => Ok(v.as_str().unwrap_or_default().to_string()),
        _ => py_repr(v),
    }
}

/// Python's `repr()` of a value.
fn py_repr(v: &Value) -> std::result::Result<String, minijinja::Error> {
    Ok(match v.kind() {
        ValueKind::Undefined => return Err(unsupported("printing an undefined value inside a list or dict".into())),
        ValueKind::None => "None".into(),
        ValueKind::Bool => if v.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number => match v.as_i64() {
            Some(i) if !is_float(v) => i.to_string(),
            _ => py_float(f64::try_from(v.clone()).map_err(|e| unsupported(format!("the number {v}: {e}")))?),
        },
        ValueKind::String => py_repr_str(v.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<String> = v.try_iter()?.map(|x| py_repr(&x)).collect::<std::result::Result<_, _>>()?;
            format!("[{}]", items.join(", "))
        }
        ValueKind::Map => {
            let mut items = Vec::new();
            for k in v.try_iter()? {
                items.push(format!("{}: {}", py_repr(&k)?, py_repr(&v.get_item(&k)?)?));
            }
            format!("{{{}}}", items.join(", "))
        }
        other => return Err(unsupported(format!("printing a value of kind {other} as Python would"))),
    })
}

/// Whether a number is a float (Python's `float`), not an integer.
fn is_float(v: &Value) -> bool {
    v.as_i64().is_none() || v.to_string().contains(['.', 'e', 'E', 'N', 'n', 'i'])
}

/// Python's `repr()` of a string: single quotes unless it holds one and no double quote; `\\`, `\n`, `\r`, `\t`, the
/// quote, and control characters escaped.
fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::from(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr()` of a float: the shortest digits that round-trip, in positional notation for exponents from -4 to
/// 15 and in scientific notation (`1e-05`, `1.5e+16`) beyond.
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if x < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        let body = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
        };
        format!("{sign}{body}")
    } else {
        let m = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        format!("{sign}{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// transformers' `tojson` filter: Python's `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, its keyword arguments included.
fn tojson(value: &Value, kwargs: minijinja::value::Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let ensure_ascii: bool = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys: bool = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or_default().to_string()),
        Some(v) => Some(" ".repeat(v.as_usize().ok_or_else(|| unsupported(format!("tojson(indent={v})")))?)),
    };
    let (item, key) = match separators {
        Some(s) if !s.is_none() => {
            let parts: Vec<Value> = s.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] => (a.as_str().unwrap_or_default().to_string(), b.as_str().unwrap_or_default().to_string()),
                _ => return Err(unsupported(format!("tojson(separators={s})"))),
            }
        }
        _ => (if indent.is_some() { "," } else { ", " }.to_string(), ": ".to_string()),
    };
    let mut out = String::new();
    Dumps { ensure_ascii, sort_keys, indent, item, key }.write(value, 0, &mut out)?;
    Ok(Value::from(out))
}

struct Dumps {
    ensure_ascii: bool,
    sort_keys: bool,
    indent: Option<String>,
    item: String,
    key: String,
}

impl Dumps {
    fn write(&self, v: &Value, depth: usize, out: &mut String) -> std::result::Result<(), minijinja::Error> {
        match v.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => match v.as_i64() {
                Some(i) if !is_float(v) => out.push_str(&i.to_string()),
                _ => {
                    let x = f64::try_from(v.clone()).map_err(|e| unsupported(format!("tojson of {v}: {e}")))?;
                    out.push_str(&match py_float(x).as_str() {
                        "nan" => "NaN".to_string(),
                        "inf" => "Infinity".to_string(),
                        "-inf" => "-Infinity".to_string(),
                        s => s.to_string(),
                    });
                }
            },
            ValueKind::String => self.string(v.as_str().unwrap_or_default(), out),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.container(out, '[', ']', depth, items.len(), |i, depth, out| self.write(&items[i], depth, out))?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort_by_key(|k| k.to_string());
                }
                self.container(out, '{', '}', depth, keys.len(), |i, depth, out| {
                    let k = &keys[i];
                    match k.kind() {
                        ValueKind::String => self.string(k.as_str().unwrap_or_default(), out),
                        _ => self.string(&py_str(k)?, out),
                    }
                    out.push_str(&self.key);
                    self.write(&v.get_item(k)?, depth, out)
                })?;
            }
            ValueKind::Undefined => {
                return Err(minijinja::Error::new(ErrorKind::InvalidOperation, "Object of type Undefined is not JSON serializable"));
            }
            other => return Err(unsupported(format!("tojson of a value of kind {other}"))),
        }
        Ok(())
    }

    fn container(
        &self,
        out: &mut String,
        open: char,
        close: char,
        depth: usize,
        n: usize,
        mut each: impl FnMut(usize, usize, &mut String) -> std::result::Result<(), minijinja::Error>,
    ) -> std::result::Result<(), minijinja::Error> {
        out.push(open);
        if n == 0 {
            out.push(close);
            return Ok(());
        }
        for i in 0..n {
            if i > 0 {
                out.push_str(&self.item);
            }
            if let Some(ind) = &self.indent {
                out.push('\n');
                out.push_str(&ind.repeat(depth + 1));
            }
            each(i, depth + 1, out)?;
        }
        if let Some(ind) = &self.indent {
            out.push('\n');
            out.push_str(&ind.repeat(depth));
        }
        out.push(close);
        Ok(())
    }

    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c if self.ensure_ascii && !c.is_ascii() => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Python's `datetime.strftime` over `now`, for the directives templates use (`%d %m %Y %y %B %b %A %a %H %I %M %S
/// %p %j %e %%`); another is an error naming it.
fn strftime(format: &str, now: Civil) -> std::result::Result<String, minijinja::Error> {
    const MONTHS: [&str; 12] =
        ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
    const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
    let days = days_from_civil(now.year, now.month, now.day);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday (Monday = 0).
    let yday = days - days_from_civil(now.year, 1, 1) + 1;
    let month = MONTHS.get(now.month.wrapping_sub(1) as usize).ok_or_else(|| unsupported(format!("month {}", now.month)))?;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let d = chars.next().ok_or_else(|| unsupported("strftime_now with a format ending in %".into()))?;
        let hour12 = if now.hour.is_multiple_of(12) { 12 } else { now.hour % 12 };
        out.push_str(&match d {
            'd' => format!("{:02}", now.day),
            'e' => format!("{:>2}", now.day),
            'm' => format!("{:02}", now.month),
            'Y' => format!("{}", now.year),
            'y' => format!("{:02}", now.year.rem_euclid(100)),
            'B' => month.to_string(),
            'b' | 'h' => month[..3].to_string(),
            'A' => DAYS[weekday].to_string(),
            'a' => DAYS[weekday][..3].to_string(),
            'H' => format!("{:02}", now.hour),
            'I' => format!("{hour12:02}"),
            'M' => format!("{:02}", now.minute),
            'S' => format!("{:02}", now.second),
            'p' => if now.hour < 12 { "AM" } else { "PM" }.to_string(),
            'j' => format!("{yday:03}"),
            '%' => "%".to_string(),
            other => return Err(unsupported(format!("strftime_now's directive %{other}"))),
        });
    }
    Ok(out)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i32, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y as i64 - 1 } else { y as i64 };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_python_prints_them() {
        for (x, want) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (-2.5e-7, "-2.5e-07"),
            (1.5e300, "1.5e+300"),
            (-0.0, "-0.0"),
        ] {
            assert_eq!(py_float(x), want, "{x}");
        }
    }

    fn template(source: &str) -> ChatTemplate {
        ChatTemplate {
            origin: "t.jinja".into(),
            source: source.into(),
            special_tokens: [("bos_token".to_string(), "<s>".to_string())].into(),
        }
    }

    #[test]
    fn a_construct_the_suite_lacks_is_refused_naming_it_and_a_raise_is_a_template_error() {
        let how = Render { add_generation_prompt: true, ..Render::default() };
        let msgs = r#"[{"role": "user", "content": "hi"}]"#;
        for (source, says) in [
            ("{{ messages[0].content.zfill(5) }}", "zfill"),
            ("{% generation %}x{% endgeneration %}", "generation"),
            ("{{ messages | frobnicate }}", "frobnicate"),
            ("{{ strftime_now('%Z') }}", "strftime_now"),
        ] {
            match template(source).render(msgs, &how) {
                Err(RenderError::Unsupported(m)) => assert!(m.contains("t.jinja") && m.contains(says), "{source}: {m}"),
                other => panic!("{source}: {other:?}"),
            }
        }
        let raised = template("{{ raise_exception('no system here') }}").render(msgs, &how);
        assert_eq!(raised, Err(RenderError::Template("t.jinja (line 1): no system here".into())));
        assert!(matches!(template("{{ 'a' + [1] }}").render(msgs, &how), Err(RenderError::Python(_))));
        assert_eq!(template("{{ bos_token }}{{ messages[0]['content'] }}").render(msgs, &how).unwrap(), "<s>hi");
    }

    #[test]
    fn strftime_knows_its_weekdays_and_refuses_what_it_lacks() {
        let now = Civil { year: 2026, month: 12, day: 8, hour: 0, minute: 5, second: 9 };
        assert_eq!(strftime("%A %d %B %Y, %I:%M %p (%a %b %j)", now).unwrap(), "Tuesday 08 December 2026, 12:05 AM (Tue Dec 342)");
        assert!(strftime("%Z", now).unwrap_err().to_string().contains("%Z"));
    }
}
