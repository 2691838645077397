//! The objects a program holds pointers to, so that every pointer it
//! passes back is checked before it is used: a stale or foreign one gets
//! `EINVAL`, not a crash.

use std::collections::BTreeSet;
use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard};

use rnic_verbs::DestroyError;

/// The addresses of the live objects of one type, in a set ordered by
/// address: a program may hold tens of thousands (a UD peer's address
/// handles, an MPI job's QPs), and each call looks its pointer up.
pub(crate) struct Live(Mutex<BTreeSet<usize>>);

impl Live {
    pub(crate) const fn new() -> Live {
        Live(Mutex::new(BTreeSet::new()))
    }

    fn list(&self) -> MutexGuard<'_, BTreeSet<usize>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the object at `p` live.
    pub(crate) fn add<T>(&self, p: *const T) {
        self.list().insert(p as usize);
    }

    /// Whether `p` is a live object.
    pub(crate) fn contains<T>(&self, p: *const T) -> bool {
        self.list().contains(&(p as usize))
    }

    /// Takes `p` off the live objects; whether it was one. Of two threads
    /// freeing one object, only one is told yes.
    pub(crate) fn remove<T>(&self, p: *const T) -> bool {
        self.list().remove(&(p as usize))
    }

    /// Runs `f` on `p` if it is a live object, holding the list: it
    /// cannot be destroyed meanwhile. Whether it was live.
    pub(crate) fn with<T>(&self, p: *mut T, f: impl FnOnce(*mut T)) -> bool {
        let l = self.list();
        let live = l.contains(&(p as usize));
        if live {
            f(p);
        }
        live
    }

    /// The first live object `hit` says yes to.
    pub(crate) fn find<T>(&self, hit: impl Fn(*mut T) -> bool) -> Option<*mut T> {
        self.list().iter().map(|&p| p as *mut T).find(|&p| hit(p))
    }

    /// Destroys the object at `p` if it is live (`EINVAL` if not): takes
    /// it off the list, destroys the driver object in its `slot` with
    /// `destroy`, and frees its box; if the device refused and handed the
    /// driver object back, puts that back and `p` back on the list, where
    /// the program still holds it. 0, or the `errno` value.
    ///
    /// # Safety
    ///
    /// Every object on this list came from `Box::into_raw` of a `Box<T>`.
    pub(crate) unsafe fn destroy<T, D>(
        &self,
        p: *mut T,
        slot: impl Fn(&mut T) -> &mut Option<D>,
        destroy: fn(D) -> Result<(), DestroyError<D>>,
    ) -> c_int {
        if !self.remove(p) {
            return libc::EINVAL;
        }
        // SAFETY: it was live, so it is a box (the caller's promise), and
        // it left the list: this thread alone holds it.
        let obj = unsafe { &mut *p };
        let code = match slot(obj).take().map(destroy) {
            Some(Err(e)) => {
                let code = e.error.errno();
                if let Some(back) = e.object {
                    *slot(obj) = Some(back);
                    self.add(p);
                    return code;
                }
                code
            }
            _ => 0,
        };
        // SAFETY: as above; nothing refers to it any more.
        drop(unsafe { Box::from_raw(p) });
        code
    }
}
