//! `docs/new-index.md` quotes the probing table from the real files. A fenced block whose first
//! line is `// PATH` (or `# PATH` in TOML) is a quote: the rest of the block must appear, line
//! for line and in one piece, in that file. So the tutorial cannot drift from the code it
//! teaches, and every file it names exists.

use std::path::Path;

/// The quotes of `doc`: (path, quoted lines).
fn quotes(doc: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(lang) = line.strip_prefix("```") else { continue };
        let block: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
        let marker = if lang == "toml" { "# " } else { "// " };
        let Some(path) = block.first().and_then(|first| first.strip_prefix(marker)) else { continue };
        if (lang == "rust" || lang == "toml") && !path.contains(' ') && path.contains('/') {
            out.push((path.to_string(), block[1..].iter().map(|l| l.to_string()).collect()));
        }
    }
    out
}

#[test]
fn every_quote_in_the_tutorial_is_in_its_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let doc = std::fs::read_to_string(root.join("docs/new-index.md")).expect("docs/new-index.md");
    let quotes = quotes(&doc);
    // The tutorial quotes layout, operations, registration, invariants, presets, plants, tests
    // and the run file: fewer quotes means the markers broke, not that the code is in step.
    assert!(quotes.len() >= 12, "only {} quotes found", quotes.len());
    for (path, quoted) in &quotes {
        assert!(!quoted.is_empty(), "an empty quote of {path}");
        let text = std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        let lines: Vec<&str> = text.lines().collect();
        let found = lines.windows(quoted.len()).any(|w| w.iter().zip(quoted).all(|(a, b)| a == b));
        assert!(found, "docs/new-index.md quotes {path}, but these lines are not in it:\n{}", quoted.join("\n"));
    }
}

#[test]
fn a_quote_that_drifted_is_caught() {
    let doc = "```rust\n// indexes/src/probe/mod.rs\nthis line is in no file\n```\n";
    let q = quotes(doc);
    assert_eq!(q, vec![("indexes/src/probe/mod.rs".to_string(), vec!["this line is in no file".to_string()])]);
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/probe/mod.rs")).unwrap();
    assert!(!text.lines().any(|l| l == q[0].1[0]));
}
