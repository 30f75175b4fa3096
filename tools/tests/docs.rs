//! The documentation's links hold: every relative link in `README.md` and in the `docs/` book
//! (`docs/SUMMARY.md` included) names a file or directory that exists, and a link with an
//! anchor into a Markdown file (`page.md#section`, or `#section` in the same page) names one of
//! that file's headings, by the anchor rule GitHub and mdBook share. Every page under `docs/` is
//! listed in `docs/SUMMARY.md`, so the book shows it. The exporter overview and the
//! introduction name every exporter plug-in the workspace ships.
//!
//! Links are read the way Markdown reads them: nothing inside a fenced code block or a code
//! span is a link; a destination may be written `<...>` and may carry a title. Links with a
//! scheme (`https:`, `mailto:`) are not checked.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use nixl_telemetry_tools::files_with_extension;

/// One link destination found in a Markdown text.
#[derive(Debug, PartialEq)]
struct Link {
    /// 1-based line of the destination.
    line: usize,
    /// The destination as written, without angle brackets or title.
    target: String,
}

/// The text outside fenced code blocks, with every code span blanked (its characters replaced
/// by spaces, its line breaks kept), so that line numbers still match the source.
fn prose(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut fence: Option<(char, usize)> = None;
    for line in markdown.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |c| trimmed.chars().take_while(|x| *x == c).count());
        match fence {
            Some((c, len)) => {
                if marker == Some(c) && run >= len && trimmed[run..].trim().is_empty() {
                    fence = None;
                }
                out.push_str(if line.ends_with('\n') { "\n" } else { "" });
            }
            None if run >= 3 => {
                fence = marker.map(|c| (c, run));
                out.push_str(if line.ends_with('\n') { "\n" } else { "" });
            }
            None => out.push_str(line),
        }
    }
    blank_code_spans(&out)
}

/// Replaces each code span (a run of backticks up to the next run of the same length) by
/// spaces, keeping line breaks; a run with no closing run is literal text.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let run_at = |i: usize| chars[i..].iter().take_while(|c| **c == '`').count();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let open = run_at(i);
        let mut j = i + open;
        let close = loop {
            if j >= chars.len() {
                break None;
            }
            if chars[j] == '`' {
                let run = run_at(j);
                if run == open {
                    break Some(j);
                }
                j += run;
            } else {
                j += 1;
            }
        };
        match close {
            Some(end) => {
                for c in &chars[i..end + open] {
                    out.push(if *c == '\n' { '\n' } else { ' ' });
                }
                i = end + open;
            }
            None => {
                out.extend(&chars[i..i + open]);
                i += open;
            }
        }
    }
    out
}

/// Every link destination of a Markdown text: inline links and images (`[text](dest)`,
/// `![alt](dest "title")`) and reference definitions (`[label]: dest`).
fn links(markdown: &str) -> Vec<Link> {
    let text = prose(markdown);
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("](") {
        let start = from + at + 2;
        let mut depth = 0usize;
        let mut end = text.len();
        for (k, c) in text[start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = start + k;
                    break;
                }
                ')' => depth -= 1,
                '\n' => {
                    end = start + k;
                    break;
                }
                _ => {}
            }
        }
        found.push(Link {
            line: line_of(start),
            target: destination(&text[start..end]),
        });
        from = end;
    }
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if line.len() - trimmed.len() > 3 || !trimmed.starts_with('[') {
            continue;
        }
        if let Some(close) = trimmed.find("]:") {
            found.push(Link {
                line: index + 1,
                target: destination(&trimmed[close + 2..]),
            });
        }
    }
    found.sort_by_key(|link| link.line);
    found
}

/// A destination without its angle brackets and its title.
fn destination(raw: &str) -> String {
    let raw = raw.trim();
    match raw.strip_prefix('<') {
        Some(rest) => rest.split('>').next().unwrap_or_default().to_string(),
        None => raw
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
    }
}

/// The anchor GitHub and mdBook give a heading: its text without code marks and link
/// destinations, lower-cased, spaces turned into hyphens, and every character other than
/// letters, digits, `-` and `_` removed.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find("](") {
        text.push_str(&rest[..open]);
        rest = rest[open + 2..]
            .split_once(')')
            .map_or("", |(_, after)| after);
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_whitespace() => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// The anchors of a Markdown text's headings (ATX `#` headings outside code blocks); a repeated
/// heading gets `-1`, `-2`, ... as on GitHub and in mdBook.
fn anchors(markdown: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fence: Option<(char, usize)> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |c| trimmed.chars().take_while(|x| *x == c).count());
        if let Some((c, len)) = fence {
            if marker == Some(c) && run >= len {
                fence = None;
            }
            continue;
        }
        if run >= 3 {
            fence = marker.map(|c| (c, run));
            continue;
        }
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        let after = &trimmed[level..];
        if line.len() - trimmed.len() > 3
            || !(1..=6).contains(&level)
            || !(after.is_empty() || after.starts_with(' '))
        {
            continue;
        }
        let base = slug(after.trim().trim_end_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    seen
}

/// Whether a destination leaves the repository (`https://...`, `mailto:...`).
fn has_scheme(target: &str) -> bool {
    let end = target.find(['/', '#', '?']).unwrap_or(target.len());
    target[..end].contains(':')
}

/// One line per broken relative link in `pages` (paths relative to `root`), naming the page,
/// the line and what is missing.
fn broken_links(root: &Path, pages: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(root.join(page))
            .unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        for link in links(&text) {
            if link.target.is_empty() || has_scheme(&link.target) {
                continue;
            }
            let at = format!("{}:{}: `{}`", page.display(), link.line, link.target);
            let (path, anchor) = match link.target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (link.target.as_str(), None),
            };
            let file = if path.is_empty() {
                root.join(page)
            } else {
                root.join(page).parent().unwrap().join(path)
            };
            if !file.exists() {
                broken.push(format!("{at}: no file {}", file.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if file.extension().is_some_and(|e| e == "md") {
                let headings = anchors(&std::fs::read_to_string(&file).unwrap());
                if !headings.contains(anchor) {
                    broken.push(format!("{at}: no heading with anchor #{anchor}"));
                }
            }
        }
    }
    broken
}

/// Every `.md` file under `dir`, relative to `root`, sorted.
fn markdown_files(root: &Path, dir: &Path) -> Vec<PathBuf> {
    files_with_extension(&root.join(dir), "md")
        .into_iter()
        .map(|path| path.strip_prefix(root).unwrap().to_path_buf())
        .collect()
}

#[test]
fn every_relative_link_of_the_readme_and_the_book_resolves() {
    let root = nixl_telemetry_tools::root();
    let mut pages = vec![PathBuf::from("README.md")];
    pages.extend(markdown_files(root, Path::new("docs")));
    assert!(
        pages.iter().any(|p| p.ends_with("SUMMARY.md")),
        "docs/SUMMARY.md is missing"
    );
    let broken = broken_links(root, &pages);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The shipped exporter plug-ins, by plug-in name: the workspace's default members under
/// `plugins/`, each its library's name without `telemetry_exporter_`.
fn shipped_exporters(root: &Path) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = manifest
        .lines()
        .find_map(|l| l.strip_prefix("default-members = ["))
        .expect("default-members in Cargo.toml");
    members
        .split('"')
        .filter_map(|m| m.strip_prefix("plugins/"))
        .map(|dir| {
            let plugin =
                std::fs::read_to_string(root.join("plugins").join(dir).join("Cargo.toml")).unwrap();
            let lib = plugin.split_once("[lib]").expect("a [lib] section").1;
            let name = lib
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = \""))
                .and_then(|n| n.strip_suffix('"'))
                .expect("the library's name");
            name.strip_prefix("telemetry_exporter_").unwrap().to_owned()
        })
        .collect()
}

/// The names in `libtelemetry_exporter_{a,b}.so` on `page`.
fn shipped_on(page: &str) -> BTreeSet<String> {
    let (_, rest) = page
        .split_once("libtelemetry_exporter_{")
        .expect("a libtelemetry_exporter_{...}.so list");
    let (list, _) = rest.split_once("}.so").unwrap();
    list.split(',').map(|n| n.trim().to_owned()).collect()
}

/// The exporter overview's table has a row for every shipped exporter plug-in, and the overview
/// and the introduction list the same shipped libraries as the workspace builds.
#[test]
fn the_overview_and_the_introduction_name_every_shipped_exporter() {
    let root = nixl_telemetry_tools::root();
    let shipped = shipped_exporters(root);
    assert!(
        shipped.contains("remote_write") && shipped.len() >= 5,
        "{shipped:?}"
    );
    let overview = std::fs::read_to_string(root.join("docs/exporters/README.md")).unwrap();
    for name in &shipped {
        assert!(
            overview
                .lines()
                .any(|l| l.starts_with(&format!("| `{name}` |"))),
            "docs/exporters/README.md has no row for {name}"
        );
    }
    for page in ["docs/exporters/README.md", "docs/introduction.md"] {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        assert_eq!(shipped_on(&text), shipped, "{page}");
    }
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let root = nixl_telemetry_tools::root();
    let summary = std::fs::read_to_string(root.join("docs/SUMMARY.md")).unwrap();
    let listed: HashSet<PathBuf> = links(&summary)
        .into_iter()
        .map(|link| Path::new("docs").join(link.target.split('#').next().unwrap()))
        .collect();
    let missing: Vec<String> = markdown_files(root, Path::new("docs"))
        .into_iter()
        .filter(|page| !page.ends_with("SUMMARY.md") && !listed.contains(page))
        .map(|page| page.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "pages not listed in docs/SUMMARY.md: {missing:?}"
    );
}

#[test]
fn links_are_read_as_markdown_reads_them() {
    let text = "\
# Title
See [the guide](guide/c.md) and ![a picture](img/a.png \"A title\").
Not a link: `[x](inline-code.md)`, nor ``a `[y](double.md)` span``; a span that
wraps `[z](wrapped.md)
still code` ends here. [Next](<with space.md#part-two>) [web](https://example.com/x.md)
```sh
echo [no](fenced.md)
```
   [ref]: ../examples/c/csv_exporter.c
[a (b)](paren(s).md)
";
    let found: Vec<(usize, String)> = links(text)
        .into_iter()
        .map(|link| (link.line, link.target))
        .collect();
    let expected = [
        (2, "guide/c.md"),
        (2, "img/a.png"),
        (5, "with space.md#part-two"),
        (5, "https://example.com/x.md"),
        (9, "../examples/c/csv_exporter.c"),
        (10, "paren(s).md"),
    ];
    let expected: Vec<(usize, String)> = expected
        .iter()
        .map(|(line, target)| (*line, target.to_string()))
        .collect();
    assert_eq!(found, expected);
}

#[test]
fn anchors_follow_github_and_mdbook() {
    assert_eq!(slug("Using it from C++"), "using-it-from-c");
    assert_eq!(
        slug("Multi-process exporter (`NIXL_TELEMETRY_EXPORTER=prometheus_mp`)"),
        "multi-process-exporter-nixl_telemetry_exporterprometheus_mp"
    );
    assert_eq!(
        slug("A sidecar: `nixl-telemetry serve`"),
        "a-sidecar-nixl-telemetry-serve"
    );
    assert_eq!(slug("See [the ring](ring.md) here"), "see-the-ring-here");
    let text = "# Tests\n```\n# not a heading\n```\n## Tests\n#hashtag\n    # indented code\n";
    let expected: HashSet<String> = ["tests", "tests-1"].map(String::from).into();
    assert_eq!(anchors(text), expected);
}

#[test]
fn a_broken_link_or_anchor_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(dir.path().join("docs/b.md"), "# Here\n\n## Also here\n").unwrap();
    std::fs::write(
        dir.path().join("docs/a.md"),
        "# Top\n[ok](b.md) [ok](b.md#also-here) [ok](#top) [ok](../docs/)\n\
         [gone](c.md) [bad anchor](b.md#there) [bad self](#nowhere) [ok](https://x.org/c.md)\n",
    )
    .unwrap();
    let broken = broken_links(dir.path(), &[PathBuf::from("docs/a.md")]);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(
        broken[0].starts_with("docs/a.md:3: `c.md`: no file"),
        "{}",
        broken[0]
    );
    assert!(
        broken[1].ends_with("no heading with anchor #there"),
        "{}",
        broken[1]
    );
    assert!(
        broken[2].ends_with("no heading with anchor #nowhere"),
        "{}",
        broken[2]
    );
}
