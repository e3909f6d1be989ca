//! Listing with a delimiter as pure logic: keys under a prefix, after a
//! marker, rolled up into common prefixes at a delimiter, paged — over any
//! source of keys in name order. [`Client::list_page`](crate::Client::list_page)
//! runs it over the om's `ListKeys`; the S3 gateway's ListObjects and the
//! object_store adapter's `list_with_delimiter` use that; the tests here run
//! it over a `BTreeMap`.
//!
//! Source: AWS S3 API reference, ListObjectsV2 (`Prefix`, `Delimiter`,
//! `StartAfter`/`ContinuationToken`, `MaxKeys`, `CommonPrefixes`).

use std::future::Future;

/// A listed item with a key name (the om's `KeyInfo`, or a plain name).
pub trait Named {
    /// The key's name.
    fn name(&self) -> &str;
}

impl Named for proto_crate::KeyInfo {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for String {
    fn name(&self) -> &str {
        self
    }
}

/// One page of a listing: objects and common prefixes in key order, and the
/// last key or prefix emitted (the continuation point) if truncated.
#[derive(Debug)]
pub struct Page<T> {
    /// Keys not rolled up into a prefix, in name order.
    pub objects: Vec<T>,
    /// Common prefixes, each ending with the delimiter, in name order.
    pub prefixes: Vec<String>,
    /// Where the next page starts (pass it as `after`); `None` on the last page.
    pub next: Option<String>,
}

/// Sorts after every key that starts with the string it is appended to.
const PAST_PREFIX: char = '\u{10FFFF}';

/// The common prefix of `name` under `prefix` at `delimiter`, if any.
fn common_prefix(name: &str, prefix: &str, delimiter: Option<&str>) -> Option<String> {
    let d = delimiter?;
    let rest = name.get(prefix.len()..)?;
    rest.find(d)
        .map(|i| name[..prefix.len() + i + d.len()].to_string())
}

/// Lists as S3 does: keys under `prefix` after `after`, rolled up into
/// common prefixes at `delimiter` (an empty one is none), at most `max`
/// entries (objects and prefixes together). `fetch(cursor, n)` returns up to
/// `n` keys under `prefix` strictly after `cursor`, in name order (`batch`
/// per call). A common prefix is skipped in one step (the next fetch starts
/// past all its keys), so a page costs O(max + prefixes) fetched keys, not
/// O(keys under the prefix).
///
/// # Errors
/// `fetch`'s error.
pub async fn list_page<T, E, F, Fut>(
    mut fetch: F,
    prefix: &str,
    delimiter: Option<&str>,
    after: &str,
    max: usize,
    batch: u32,
) -> Result<Page<T>, E>
where
    T: Named,
    F: FnMut(String, u32) -> Fut,
    Fut: Future<Output = Result<Vec<T>, E>>,
{
    let delimiter = delimiter.filter(|d| !d.is_empty());
    let batch = batch.max(1);
    let mut page = Page {
        objects: Vec::new(),
        prefixes: Vec::new(),
        next: None,
    };
    // A continuation point inside a common prefix means that prefix was
    // already returned: resume past all its keys.
    let mut cursor = match common_prefix(after, prefix, delimiter) {
        Some(cp) => format!("{cp}{PAST_PREFIX}"),
        None => after.to_string(),
    };
    let mut last_emitted: Option<String> = None;
    let mut count = 0usize;
    'pages: loop {
        let keys = fetch(cursor.clone(), batch).await?;
        let exhausted = keys.len() < batch as usize;
        let Some(last_name) = keys.last().map(|k| k.name().to_string()) else {
            break;
        };
        for k in keys {
            let common = common_prefix(k.name(), prefix, delimiter);
            if let Some(cp) = &common
                && page.prefixes.last() == Some(cp)
            {
                continue;
            }
            if count == max {
                page.next = last_emitted;
                break 'pages;
            }
            count += 1;
            match common {
                Some(cp) => {
                    last_emitted = Some(cp.clone());
                    page.prefixes.push(cp);
                }
                None => {
                    last_emitted = Some(k.name().to_string());
                    page.objects.push(k);
                }
            }
        }
        if exhausted {
            break;
        }
        cursor = match page.prefixes.last() {
            Some(cp) if last_emitted.as_deref() == Some(cp.as_str()) => {
                format!("{cp}{PAST_PREFIX}").max(last_name)
            }
            _ => last_name,
        };
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::convert::Infallible;

    use proptest::prelude::*;

    use super::*;

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    /// One listing entry of the model: an object or a common prefix.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    enum Entry {
        Object(String),
        Prefix(String),
    }

    /// The whole listing, straight from the definition: every key under
    /// `prefix` after `after`, rolled up, each prefix once, in order.
    fn model(
        keys: &BTreeSet<String>,
        prefix: &str,
        delim: Option<&str>,
        after: &str,
    ) -> Vec<Entry> {
        let mut out: Vec<Entry> = Vec::new();
        let skip_prefix = common_prefix(after, prefix, delim);
        for k in keys
            .iter()
            .filter(|k| k.starts_with(prefix) && k.as_str() > after)
        {
            let e = match common_prefix(k, prefix, delim) {
                Some(cp) => Entry::Prefix(cp),
                None => Entry::Object(k.clone()),
            };
            if let Entry::Prefix(cp) = &e
                && (skip_prefix.as_ref() == Some(cp) || out.last() == Some(&e))
            {
                continue;
            }
            out.push(e);
        }
        out
    }

    fn pages(
        keys: &BTreeSet<String>,
        prefix: &str,
        delim: Option<&str>,
        start: &str,
        max: usize,
        batch: u32,
    ) -> (Vec<Entry>, usize) {
        let mut all = Vec::new();
        let mut after = start.to_string();
        let mut n = 0;
        loop {
            let fetch = |cursor: String, limit: u32| {
                let got: Vec<String> = keys
                    .range::<String, _>((
                        std::ops::Bound::Excluded(cursor),
                        std::ops::Bound::Unbounded,
                    ))
                    .filter(|k| k.starts_with(prefix))
                    .take(limit as usize)
                    .cloned()
                    .collect();
                async move { Ok::<_, Infallible>(got) }
            };
            let page = block_on(list_page(fetch, prefix, delim, &after, max, batch))
                .unwrap_or_else(|e: Infallible| match e {});
            n += 1;
            assert!(
                page.objects.len() + page.prefixes.len() <= max,
                "page over max"
            );
            let mut entries: Vec<Entry> = page
                .objects
                .into_iter()
                .map(Entry::Object)
                .chain(page.prefixes.into_iter().map(Entry::Prefix))
                .collect();
            entries.sort_by(|a, b| {
                let key = |e: &Entry| match e {
                    Entry::Object(s) | Entry::Prefix(s) => s.clone(),
                };
                key(a).cmp(&key(b))
            });
            all.extend(entries);
            match page.next {
                Some(next) => after = next,
                None => return (all, n),
            }
            assert!(n < 10_000, "paging does not end");
        }
    }

    proptest! {
        /// Paging through a listing with any page size and fetch batch
        /// yields exactly the model's listing, each entry once, in order.
        #[test]
        fn pages_concatenate_to_the_model(
            keys in prop::collection::btree_set("[ab/]{1,5}", 0..40),
            prefix in "[ab/]{0,2}",
            delim in prop::option::of(Just("/")),
            start in "[ab/]{0,3}",
            max in 1usize..6,
            batch in 1u32..5,
        ) {
            let (got, _) = pages(&keys, &prefix, delim, &start, max, batch);
            prop_assert_eq!(got, model(&keys, &prefix, delim, &start));
        }
    }

    #[test]
    fn a_common_prefix_costs_one_entry_and_no_key_by_key_walk() {
        // 1000 keys under one prefix: a page of 2 lists the prefix and the
        // next object, and the fetches stop right past the prefix.
        let mut keys: BTreeSet<String> = (0..1000).map(|i| format!("d/{i:04}")).collect();
        keys.insert("e".into());
        let calls = std::cell::Cell::new(0);
        let fetch = |cursor: String, limit: u32| {
            calls.set(calls.get() + 1);
            let got: Vec<String> = keys
                .range::<String, _>((
                    std::ops::Bound::Excluded(cursor),
                    std::ops::Bound::Unbounded,
                ))
                .take(limit as usize)
                .cloned()
                .collect();
            async move { Ok::<_, Infallible>(got) }
        };
        let page = block_on(list_page(fetch, "", Some("/"), "", 2, 3))
            .unwrap_or_else(|e: Infallible| match e {});
        assert_eq!(page.prefixes, vec!["d/".to_string()]);
        assert_eq!(page.objects, vec!["e".to_string()]);
        assert_eq!(calls.get(), 2, "one fetch in the prefix, one past it");
    }
}
