//! The two text formats a scrape is served in, and which one a request
//! gets: the classic Prometheus text format (0.0.4), which `promtool
//! check metrics` and every Prometheus-compatible scraper read, by
//! default; OpenMetrics 1.0.0 when the `Accept` header prefers it.
//!
//! prometheus-client encodes OpenMetrics only, so the classic form is
//! rewritten from its output ([`classic`]); what the registry holds and
//! how samples are written stays the crate's. Each media range of
//! `Accept` is parsed by the `mime` crate; this file only ranks them.

/// The classic text format's content type.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The OpenMetrics text format's content type.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A scrape's text format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text exposition format 0.0.4: no `info` or
    /// `unknown` types, no `# UNIT` lines, no `# EOF`.
    Text,
    /// OpenMetrics 1.0.0, ending with `# EOF`.
    OpenMetrics,
}

impl Format {
    /// The format for the `Accept` header values `accept`: OpenMetrics
    /// when it is ranked strictly above `text/plain` (by q-value, each
    /// type ranked by its most specific matching range), else the
    /// classic text, also when nothing is named (no header, `*/*`) or
    /// neither is acceptable.
    pub fn from_accept<'a>(accept: impl IntoIterator<Item = &'a str>) -> Format {
        let ranges: Vec<(mime::Mime, f32)> = accept
            .into_iter()
            .flat_map(|v| v.split(','))
            .filter_map(media_range)
            .collect();
        if quality(&ranges, "application", "openmetrics-text") > quality(&ranges, "text", "plain") {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The answer's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => TEXT_CONTENT_TYPE,
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }
}

/// One element of an `Accept` header, parsed by `mime`, with its q-value;
/// `None` when it is not a media range or its q-value is not a number
/// from 0 to 1.
fn media_range(element: &str) -> Option<(mime::Mime, f32)> {
    let range: mime::Mime = element.trim().parse().ok()?;
    let q = match range.get_param("q") {
        None => 1.0,
        Some(q) => q
            .as_str()
            .parse()
            .ok()
            .filter(|q| (0.0..=1.0).contains(q))?,
    };
    Some((range, q))
}

/// The q-value `ranges` give `kind/sub`: that of the most specific range
/// matching it (`kind/sub`, then `kind/*`, then `*/*`), the highest among
/// equally specific ones; 0 when none matches.
fn quality(ranges: &[(mime::Mime, f32)], kind: &str, sub: &str) -> f32 {
    let specificity = |range: &mime::Mime| {
        let (k, s) = (range.type_().as_str(), range.subtype().as_str());
        match (k == kind, s == sub) {
            (true, true) => Some(2),
            (true, false) if s == "*" => Some(1),
            _ if k == "*" && s == "*" => Some(0),
            _ => None,
        }
    };
    ranges
        .iter()
        .filter_map(|(range, q)| Some((specificity(range)?, *q)))
        .max_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)))
        .map_or(0.0, |(_, q)| q)
}

/// The classic text form of prometheus-client's OpenMetrics text: a
/// counter's `# HELP` and `# TYPE` name its `_total` samples, an `info`
/// metric becomes a gauge named `_info` (its one sample is 1), `unknown`
/// becomes `untyped`, and every other comment (`# UNIT`, `# EOF`) goes.
/// Samples are kept as they are: both formats write them alike, and the
/// daemon records no exemplars and no `_created` samples.
pub fn classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').map(|(_, text)| text);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (suffix, kind) = match kind {
                "counter" => ("_total", "counter"),
                "info" => ("_info", "gauge"),
                "unknown" => ("", "untyped"),
                kind => ("", kind),
            };
            if let Some(text) = help.take() {
                out.push_str(&format!("# HELP {name}{suffix} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name}{suffix} {kind}\n"));
        } else if !line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_choose_the_format_by_q_value() {
        let cases: [(&[&str], Format); 14] = [
            (&[], Format::Text),
            (&["*/*"], Format::Text),
            (&[""], Format::Text),
            (&["text/plain"], Format::Text),
            (&["text/plain; version=0.0.4; charset=utf-8"], Format::Text),
            (&["application/openmetrics-text"], Format::OpenMetrics),
            (
                &["Application/OpenMetrics-Text; Version=1.0.0"],
                Format::OpenMetrics,
            ),
            // Prometheus's own scrape header.
            (
                &[
                    "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1",
                ],
                Format::OpenMetrics,
            ),
            (
                &[
                    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
                ],
                Format::OpenMetrics,
            ),
            (
                &["application/openmetrics-text;q=0.3", "text/plain;q=0.6"],
                Format::Text,
            ),
            (&["application/openmetrics-text;q=0.5, */*"], Format::Text),
            (&["application/*, text/plain;q=0.9"], Format::OpenMetrics),
            (
                &["text/*;q=0, application/openmetrics-text"],
                Format::OpenMetrics,
            ),
            (&["application/openmetrics-text;q=2, */*"], Format::Text),
        ];
        for (accept, want) in cases {
            assert_eq!(
                Format::from_accept(accept.iter().copied()),
                want,
                "{accept:?}"
            );
        }
    }

    #[test]
    fn classic_text_names_counters_and_info_as_prometheus_reads_them() {
        let open = "# HELP c Claims.\n# TYPE c counter\nc_total{queue=\"q\"} 0\n\
                    # HELP d_seconds Took.\n# TYPE d_seconds histogram\n# UNIT d_seconds seconds\n\
                    d_seconds_bucket{le=\"+Inf\"} 1\nd_seconds_sum 0.5\nd_seconds_count 1\n\
                    # HELP b Version.\n# TYPE b info\nb_info{version=\"1\"} 1\n# EOF\n";
        let want = "# HELP c_total Claims.\n# TYPE c_total counter\nc_total{queue=\"q\"} 0\n\
                    # HELP d_seconds Took.\n# TYPE d_seconds histogram\n\
                    d_seconds_bucket{le=\"+Inf\"} 1\nd_seconds_sum 0.5\nd_seconds_count 1\n\
                    # HELP b_info Version.\n# TYPE b_info gauge\nb_info{version=\"1\"} 1\n";
        assert_eq!(classic(open), want);
    }
}
