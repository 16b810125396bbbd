//! How every watch of karpenter-rs lists: [`config`].

use kube::runtime::watcher;

/// Objects per page of a watch's (re)list. kube-runtime's default is 500, and a watcher holds
/// a whole page while it hands the objects out one by one: 500 Pods or NodeClaims are ~5 MB
/// held at once, a twentieth of what the controller holds in all at 1,000 nodes (heaptrack of
/// upstream's interference scenario, docs/benchmarks.md). 100 keeps a relist of 10,000 pods
/// to 100 requests.
pub const LIST_PAGE_SIZE: u32 = 100;

/// `watcher::Config::default()` listing [`LIST_PAGE_SIZE`] objects per page.
pub fn config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_list_in_pages_of_a_hundred() {
        assert_eq!(config().page_size, Some(LIST_PAGE_SIZE));
        assert_eq!(watcher::Config::default().page_size, Some(500));
    }
}
