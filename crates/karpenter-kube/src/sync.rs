//! Locks that survive a panicked holder.
//!
//! The data behind our locks (caches, counters, the cluster state) stays consistent between
//! statements, and a panic is already reported by supervision; refusing every later access would
//! turn one failed task into a dead replica. So a poisoned lock is taken as it is.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `mutex`, ignoring poisoning.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Read-locks `lock`, ignoring poisoning.
pub fn read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Write-locks `lock`, ignoring poisoning.
pub fn write<T: ?Sized>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_lock_poisoned_by_a_panic_still_opens() {
        let mutex = Arc::new(Mutex::new(1));
        let rw = Arc::new(RwLock::new(1));
        let (m, r) = (mutex.clone(), rw.clone());
        let panicked = std::thread::spawn(move || {
            let _m = m.lock().unwrap();
            let _r = r.write().unwrap();
            panic!("holder dies");
        })
        .join();
        assert!(panicked.is_err());
        assert!(mutex.is_poisoned() && rw.is_poisoned());
        *lock(&mutex) += 1;
        *write(&rw) += 1;
        assert_eq!(*lock(&mutex), 2);
        assert_eq!(*read(&rw), 2);
    }
}
