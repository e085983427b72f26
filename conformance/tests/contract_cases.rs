//! CONTRACT.md and the suite agree: every case the contract cites exists,
//! and every rule of the sections that cite cases names at least one.
//!
//! A case is cited as a backticked name (`like_this_one`). A backticked
//! snake_case name of four words or more is taken as a citation, so a
//! misspelt or renamed case fails here instead of silently citing nothing.

use std::collections::BTreeSet;

const CONTRACT: &str = include_str!("../../store-api/CONTRACT.md");

/// Sections whose every rule (each bullet, or each paragraph when the
/// section has no bullets) must cite a case.
const CITING_SECTIONS: &[&str] = &[
    "Validation (every call, before anything else)",
    "Append precedence",
    "Cursors",
    "Claims",
    "Renew",
    "Complete and fail",
    "Clear, reclaim",
    "Redrive",
    "Snapshots",
    "Declarations",
    "Subscriptions",
    "Presence",
    "Sessions",
    "Work across sessions",
    "Scheduled heads",
    "Paused consumers",
    "Lane-exact and bulk redrive",
    "Forks",
    "Rewriting payloads",
];

/// A rule proven outside the shared suite says so with these words.
const OWN_TESTS: &str = "each backend's own tests";

/// The backticked spans of `text`.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Whether `span` looks like a case name: lower snake_case, four words or more.
fn looks_like_case(span: &str) -> bool {
    span.split('_').count() >= 4
        && span
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The sections of the contract: `(title, body)` by `## ` heading.
fn sections(text: &str) -> Vec<(&str, String)> {
    let mut out: Vec<(&str, String)> = Vec::new();
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            out.push((title.trim(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// The rules of a section body: its bullets (with their continuation
/// lines) or, without bullets, its paragraphs.
fn rules(body: &str) -> Vec<String> {
    let has_bullets = body.lines().any(|line| line.starts_with("- "));
    let mut out: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in body.lines() {
        let starts = if has_bullets {
            line.starts_with("- ")
        } else {
            !line.trim().is_empty() && current.is_none()
        };
        if starts {
            if let Some(rule) = current.take() {
                out.push(rule);
            }
            current = Some(line.to_owned());
        } else if line.trim().is_empty() {
            if !has_bullets {
                if let Some(rule) = current.take() {
                    out.push(rule);
                }
            }
        } else if let Some(rule) = current.as_mut() {
            rule.push(' ');
            rule.push_str(line.trim());
        }
    }
    out.extend(current);
    out
}

#[test]
fn every_cited_case_exists() {
    let cases: BTreeSet<&str> = a2_conformance::case_names().collect();
    let cited: BTreeSet<&str> = backticked(CONTRACT)
        .into_iter()
        .filter(|span| looks_like_case(span))
        .collect();
    assert!(
        cited.len() >= 20,
        "the scan found only {} citations: {cited:?}",
        cited.len()
    );
    let missing: Vec<&&str> = cited
        .iter()
        .filter(|name| !cases.contains(**name))
        .collect();
    assert!(
        missing.is_empty(),
        "CONTRACT.md cites cases the suite does not have: {missing:?}"
    );
}

#[test]
fn every_rule_of_the_citing_sections_cites_a_case() {
    let cases: BTreeSet<&str> = a2_conformance::case_names().collect();
    let all = sections(CONTRACT);
    for title in CITING_SECTIONS {
        let (_, body) = all
            .iter()
            .find(|(t, _)| t == title)
            .unwrap_or_else(|| panic!("CONTRACT.md has no section '## {title}'"));
        let rules = rules(body);
        assert!(!rules.is_empty(), "section '{title}' has no rules");
        for rule in rules {
            let cites = backticked(&rule).iter().any(|span| cases.contains(span));
            assert!(
                cites || rule.contains(OWN_TESTS),
                "a rule of '{title}' cites no conformance case: {rule}"
            );
        }
    }
}

#[test]
fn the_scan_sees_what_it_should() {
    // The helpers themselves: a rule without a citation is reported, a
    // paragraph section splits into paragraphs, a bullet keeps its lines.
    let body = "intro\n\n- one `a_b_c_d`\n  more\n- two\n";
    assert_eq!(rules(body), ["- one `a_b_c_d` more", "- two"]);
    assert_eq!(rules("first\nline\n\nsecond\n"), ["first line", "second"]);
    assert!(looks_like_case(
        "redrive_takes_the_first_dead_letter_at_an_index"
    ));
    assert!(!looks_like_case("has_pending"));
    assert!(!looks_like_case("MAX_WORK_LIMIT_X"));
    assert_eq!(backticked("a `x` b `y` c"), ["x", "y"]);
}
