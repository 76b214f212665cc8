//! `docs/ops.md` is generated from the op table; this test keeps it current.

#[test]
fn ops_md_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ops.md");
    let want = aoc_ir::opdocs::ops_markdown();
    if std::env::var_os("AOC_BLESS").is_some() {
        std::fs::write(path, &want).expect("write docs/ops.md");
        return;
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(have == want, "docs/ops.md is out of date with the op table: run `AOC_BLESS=1 cargo test -p aoc-ir --test ops_doc`");
}
