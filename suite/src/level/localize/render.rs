//! Localize's words and plots: the line a failing trial's message gains, the whole table `xtask localize` prints,
//! the noise multiple of every module along the model (log scale, the first one out marked) in the HTML report,
//! and its summary row.

use super::golden::Role;
use super::judge::{Localization, Row, State};
use super::place::Unplaced;
use crate::outcome::{Judgement, NumbersTable, Shown};
use crate::report::summary::sci;
use crate::report::svg::{self, LineChart, Series};

/// A module as the reports name it: its path, and which side of it.
fn module(r: &Row) -> String {
    match r.role {
        Role::Output => r.module.clone(),
        Role::Input => format!("{} (its input: the residual stream)", r.module),
    }
}

fn grouped(n: f64) -> String {
    let digits = format!("{:.0}", n.round());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 && c.is_ascii_digit() {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn multiple(m: f64) -> String {
    if m >= 10.0 { format!("{}x", grouped(m)) } else { format!("{m:.2}x") }
}

/// The one line a failing trial's message gains: the first module out of noise, what came before and after it.
/// No time in it: a message repeats exactly from run to run (`xtask localize` prints how long it took).
pub fn headline(l: &Localization) -> String {
    let before = l.within_before();
    let unplaced = l.unplaced().count();
    let tail = format!(
        "{}(the whole table: `cargo xtask localize <trial>`)",
        if unplaced > 0 { format!("{unplaced} modules unplaced; ") } else { String::new() }
    );
    let Some(first) = l.first else {
        let largest = l.rows.iter().filter_map(|r| match r.state {
            State::Within { multiple, .. } => Some(multiple),
            _ => None,
        });
        let known = l.rows.iter().filter(|r| matches!(r.state, State::Known { .. })).count();
        let carried = l.rows.iter().filter(|r| matches!(r.state, State::Carried { .. })).count();
        let but = match (known, carried) {
            (0, 0) => String::new(),
            (k, c) => format!(", but for {k} known deviations and {c} modules carrying them"),
        };
        return format!(
            "localized: every module recorded is within the reference's noise{but} (largest {}; bound {}): the \
             difference arises after the last one, in the head {tail}",
            multiple(largest.fold(0.0, f64::max)),
            multiple(l.bound)
        );
    };
    let r = &l.rows[first];
    let (out, compared) = l.later();
    let later = match (out, compared) {
        (_, 0) => "no module after it".to_string(),
        (o, c) if o == c => "every later module out of noise".to_string(),
        (o, c) => format!("{o} of the {c} later modules out of noise"),
    };
    let what = match r.state {
        State::NonFinite { count } => format!("first module not finite: {}: {count} values NaN or infinite", module(r)),
        State::Out { max_abs, multiple: m } => {
            format!("first module out of noise: {}: max |diff| {max_abs:.3e} = {} the reference's noise", module(r), multiple(m))
        }
        State::KnownMoved { max_abs, multiple: m, range: [lo, hi] } => format!(
            "first module out of noise: {}, a deviation the case knows, moved: max |diff| {max_abs:.3e} = {} the \
             reference's noise, outside its stated {}..{}",
            module(r),
            multiple(m),
            multiple(lo),
            multiple(hi)
        ),
        _ => unreachable!("the first row is news"),
    };
    let at = match &r.rows {
        None => "at the last prompt position".to_string(),
        Some(rows) => format!("at rows {} of its tensor", rows.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")),
    };
    format!("{what} ({at}); {before} modules before it within noise; {later} {tail}")
}

/// The line a failing trial's message gains when nothing was localized, and why.
pub fn not_localized(why: &str) -> String {
    format!("not localized: {}", why.lines().next().unwrap_or_default())
}

fn state(s: &State) -> (String, String, &'static str) {
    match s {
        State::Within { max_abs, multiple: m } => (format!("{max_abs:.3e}"), multiple(*m), "within"),
        State::Out { max_abs, multiple: m } => (format!("{max_abs:.3e}"), multiple(*m), "OUT"),
        State::Carried { max_abs, multiple: m, from } => (format!("{max_abs:.3e} (carried from row {from})"), multiple(*m), "carried"),
        State::Known { max_abs, multiple: m } => (format!("{max_abs:.3e}"), multiple(*m), "known"),
        State::KnownMoved { max_abs, multiple: m, range: [lo, hi] } => {
            (format!("{max_abs:.3e} (known range {}..{})", multiple(*lo), multiple(*hi)), multiple(*m), "KNOWN MOVED")
        }
        State::NonFinite { count } => (format!("{count} not finite"), "–".into(), "NOT FINITE"),
        State::Length { got, want } => (format!("{got} values, reference {want}"), "–".into(), "not compared"),
        State::Unplaced(Unplaced::Absent) => ("no value of the package carries it".into(), "–".into(), "unplaced"),
        State::Unplaced(Unplaced::Several(v)) => (format!("{} values leave it: {}", v.len(), v.join(", ")), "–".into(), "unplaced"),
        State::Unplaced(Unplaced::NoSum { node }) => (format!("fused norm {node} does not output its sum"), "–".into(), "unplaced"),
        State::Unreadable(why) => (why.clone(), "–".into(), "not compared"),
    }
}

/// Every module, in the model's order, as `xtask localize` prints it.
pub fn table(trial: &str, l: &Localization) -> String {
    let mut out = format!("{trial}: localized along the model (bound {} the reference's noise)\n", multiple(l.bound));
    out.push_str(&format!("{}\n", headline(l).split(" (the whole table").next().unwrap_or_default()));
    for (i, r) in l.rows.iter().enumerate() {
        let (diff, m, verdict) = state(&r.state);
        let mark = if Some(i) == l.first { "->" } else { "  " };
        let value = r.value.as_deref().unwrap_or("–");
        out.push_str(&format!("{mark} {i:>3} {:<60} {verdict:<12} {m:>12}  {diff:<12} {value}\n", module(r)));
    }
    out
}

static TABLE: NumbersTable = NumbersTable {
    order: 9,
    title: "Localization",
    columns: "first module out of noise | its noise multiple | modules within noise before it",
};

impl Judgement for Localization {
    fn reasons(&self) -> Vec<String> {
        vec![headline(self).split(" (the whole table").next().unwrap_or_default().to_string()]
    }

    fn shown(&self) -> Shown {
        let points: Vec<Option<f64>> = self
            .rows
            .iter()
            .map(|r| match r.state {
                State::NonFinite { .. } => Some(f64::MAX.sqrt()),
                ref s => s.multiple().map(|m| m.max(1e-3)),
            })
            .collect();
        let first = self.first.map(|i| (i as f64, format!("first out: {}", self.rows[i].module)));
        let plot = svg::line_chart(&LineChart {
            title: "max |diff| over the reference's noise, module by module along the model",
            x_label: "module (in the order the model runs them)",
            x_scale: 1.0,
            log_y: true,
            series: vec![Series { label: "noise multiple", color: "#cf222e", points }],
            thresholds: vec![(self.bound, format!("bound {}", multiple(self.bound)))],
            markers: first.into_iter().collect(),
        });
        let mut numbers = vec![("first module out of noise", self.first.map_or("none".into(), |i| module(&self.rows[i])))];
        numbers.push(("modules within noise before it", self.within_before().to_string()));
        numbers.push(("modules unplaced", self.unplaced().count().to_string()));
        Shown { numbers, plots: vec![plot] }
    }

    fn summary_row(&self) -> Option<(&'static NumbersTable, String)> {
        let m = self.first.and_then(|i| self.rows[i].state.multiple());
        let first = self.first.map_or("–".to_string(), |i| self.rows[i].module.clone());
        Some((&TABLE, format!("{first} | {} | {}", sci(m), self.within_before())))
    }
}
