//! The objects a program holds pointers to, so that every pointer it
//! passes back is checked before it is used: a stale or foreign one gets
//! `EINVAL`, not a crash.

use std::sync::{Mutex, MutexGuard};

/// The addresses of the live objects of one type.
pub(crate) struct Live(Mutex<Vec<usize>>);

impl Live {
    pub(crate) const fn new() -> Live {
        Live(Mutex::new(Vec::new()))
    }

    fn list(&self) -> MutexGuard<'_, Vec<usize>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the object at `p` live.
    pub(crate) fn add<T>(&self, p: *const T) {
        self.list().push(p as usize);
    }

    /// Whether `p` is a live object.
    pub(crate) fn contains<T>(&self, p: *const T) -> bool {
        self.list().contains(&(p as usize))
    }

    /// Takes `p` off the live objects; whether it was one. Of two threads
    /// freeing one object, only one is told yes.
    pub(crate) fn remove<T>(&self, p: *const T) -> bool {
        let mut l = self.list();
        match l.iter().position(|&q| q == p as usize) {
            Some(i) => {
                l.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// The first live object `hit` says yes to.
    pub(crate) fn find<T>(&self, hit: impl Fn(*mut T) -> bool) -> Option<*mut T> {
        self.list().iter().map(|&p| p as *mut T).find(|&p| hit(p))
    }
}
