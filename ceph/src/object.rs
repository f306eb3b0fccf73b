//! One RADOS object used as a small shared record: read with its version,
//! replaced whole only if nobody changed it meanwhile (compare-and-swap on
//! the object's version), watched for notifications, and notified.
//!
//! An [`Object`] has an I/O context of its own: librados reports the version
//! of the last operation per context, so operations on one object are
//! serialised and nothing else runs on that context.

use std::ffi::{c_char, c_void, CString};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{check, cstring, ffi, Cluster, Error, Pool};

/// The errno of an object that does not exist.
const ENOENT: i32 = 2;
/// The errno of a function the loaded library lacks.
const ENOSYS: i32 = 38;
/// `LIBRADOS_CREATE_EXCLUSIVE`: creating fails if the object exists.
const CREATE_EXCLUSIVE: i32 = 1;

/// A RADOS object of a pool.
pub struct Object {
    pool: Arc<Pool>,
    oid: CString,
    name: String,
    /// Held across an operation and the version read after it.
    op: Mutex<()>,
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Object({}/{})", self.pool.name, self.name)
    }
}

/// Why a conditional write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The object changed (or was created) since the version given.
    #[error("the object changed meanwhile")]
    Changed,
    /// The write failed.
    #[error(transparent)]
    Failed(#[from] Error),
}

impl Object {
    /// Object `name` of pool `pool`, on a new I/O context of `cluster`.
    pub fn open(cluster: &Arc<Cluster>, pool: &str, name: &str) -> Result<Arc<Object>, Error> {
        Ok(Arc::new(Object {
            pool: cluster.pool(pool)?,
            oid: cstring(name)?,
            name: name.into(),
            op: Mutex::new(()),
        }))
    }

    /// `pool/object`.
    pub fn spec(&self) -> String {
        format!("{}/{}", self.pool.name, self.name)
    }

    fn lib(&self) -> &'static ffi::LibRbd {
        self.pool.cluster.lib
    }

    fn missing(&self, what: &'static str) -> Error {
        Error::Call {
            what,
            target: self.spec(),
            source: std::io::Error::from_raw_os_error(ENOSYS),
        }
    }

    /// The object's content (at most `max` bytes) and version; `None` when it
    /// does not exist. Blocks.
    pub fn read(&self, max: usize) -> Result<Option<(Vec<u8>, u64)>, Error> {
        match self.read_head(max)? {
            Some((data, _)) if data.len() > max => Err(Error::Call {
                what: "read object",
                target: self.spec(),
                source: std::io::Error::other(format!("larger than {max} bytes")),
            }),
            r => Ok(r),
        }
    }

    /// Like [`Object::read`], but an object larger than `max` bytes is not
    /// an error: its first `max + 1` bytes come back (the caller sees it is
    /// too large), with its version, so that it can be replaced. Blocks.
    pub fn read_head(&self, max: usize) -> Result<Option<(Vec<u8>, u64)>, Error> {
        let lib = self.lib();
        let (Ok(read), Ok(version)) = (&lib.rados_read, &lib.rados_get_last_version) else {
            return Err(self.missing("read"));
        };
        let mut buf = vec![0u8; max + 1];
        let _op = self.op.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: live I/O context, NUL-terminated name, `buf` writable for
        // its length during the (blocking) call.
        let r = unsafe {
            read(
                self.pool.raw,
                self.oid.as_ptr(),
                buf.as_mut_ptr() as *mut c_char,
                buf.len(),
                0,
            )
        };
        if r == -ENOENT {
            return Ok(None);
        }
        check(r, "read object", || self.spec())?;
        buf.truncate(r as usize);
        // SAFETY: live I/O context; the version is that of the read above,
        // as `op` keeps other operations off this context.
        let v = unsafe { version(self.pool.raw) };
        Ok(Some((buf, v)))
    }

    /// Replaces the object's content with `data`, if its version is still
    /// `expect` (`None`: only if it does not exist). Returns the new
    /// version. Blocks.
    pub fn write(&self, data: &[u8], expect: Option<u64>) -> Result<u64, WriteError> {
        let lib = self.lib();
        let (Ok(create_op), Ok(release), Ok(assert_version), Ok(create), Ok(write_full)) = (
            &lib.rados_create_write_op,
            &lib.rados_release_write_op,
            &lib.rados_write_op_assert_version,
            &lib.rados_write_op_create,
            &lib.rados_write_op_write_full,
        ) else {
            return Err(self.missing("write").into());
        };
        let (Ok(operate), Ok(version)) = (&lib.rados_write_op_operate, &lib.rados_get_last_version)
        else {
            return Err(self.missing("write").into());
        };
        let _op = self.op.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: creates an operation, released below on every path.
        let op = unsafe { create_op() };
        // SAFETY: `op` is live; `data` outlives the blocking operate call;
        // the context and name are live.
        let r = unsafe {
            match expect {
                Some(v) => assert_version(op, v),
                None => create(op, CREATE_EXCLUSIVE, std::ptr::null()),
            }
            write_full(op, data.as_ptr() as *const c_char, data.len());
            let r = operate(
                op,
                self.pool.raw,
                self.oid.as_ptr(),
                std::ptr::null_mut(),
                0,
            );
            release(op);
            r
        };
        // ERANGE / EOVERFLOW: the version asserted is older / newer than
        // the object's; EEXIST: it was created meanwhile.
        if r == -34 || r == -75 || r == -17 {
            return Err(WriteError::Changed);
        }
        check(r, "write object", || self.spec())?;
        // SAFETY: live context; `op` keeps other operations off it.
        Ok(unsafe { version(self.pool.raw) })
    }

    /// Sends `payload` to every watcher of the object and waits until each
    /// acknowledged it, or `timeout` passed (an `ETIMEDOUT` error: some
    /// watcher did not answer). Blocks.
    pub fn notify(&self, payload: &[u8], timeout: Duration) -> Result<(), Error> {
        let lib = self.lib();
        let (Ok(notify), Ok(free)) = (&lib.rados_notify2, &lib.rados_buffer_free) else {
            return Err(self.missing("notify"));
        };
        let mut reply: *mut c_char = std::ptr::null_mut();
        let mut reply_len = 0usize;
        // SAFETY: live context and name; the payload outlives the blocking
        // call; the reply buffer librados allocates is freed below.
        let r = unsafe {
            let r = notify(
                self.pool.raw,
                self.oid.as_ptr(),
                payload.as_ptr() as *const c_char,
                payload.len() as i32,
                timeout.as_millis() as u64,
                &mut reply,
                &mut reply_len,
            );
            if !reply.is_null() {
                free(reply);
            }
            r
        };
        check(r, "notify the watchers of", || self.spec())
    }

    /// Watches the object: `on_notify` runs (on a librados thread) with the
    /// payload of each notification, which is acknowledged when it returns
    /// true (a notifier waiting for every watcher then times out: it knows
    /// this one did not take the notification);
    /// `on_error` runs when the watch broke (notifications may have been
    /// missed: watch again, and read the object). The OSD drops a watcher
    /// it has not heard from for `timeout`.
    pub fn watch(
        self: &Arc<Self>,
        timeout: Duration,
        on_notify: impl Fn(&[u8]) -> bool + Send + Sync + 'static,
        on_error: impl Fn(i32) + Send + Sync + 'static,
    ) -> Result<Watch, Error> {
        let lib = self.lib();
        let Ok(watch) = &lib.rados_watch3 else {
            return Err(self.missing("watch"));
        };
        let ctx = Box::into_raw(Box::new(WatchCtx {
            object: self.clone(),
            on_notify: Box::new(on_notify),
            on_error: Box::new(on_error),
        }));
        let mut cookie = 0u64;
        // SAFETY: live context and name; `ctx` stays valid until the watch
        // is removed and its callbacks flushed (Watch::drop), or freed below
        // when the watch was not set up.
        let r = unsafe {
            watch(
                self.pool.raw,
                self.oid.as_ptr(),
                &mut cookie,
                Some(on_watch_notify),
                Some(on_watch_error),
                timeout.as_secs().max(1) as u32,
                ctx as *mut c_void,
            )
        };
        if let Err(e) = check(r, "watch", || self.spec()) {
            // SAFETY: librados did not keep `ctx`: the watch failed.
            drop(unsafe { Box::from_raw(ctx) });
            return Err(e);
        }
        Ok(Watch { ctx, cookie })
    }
}

/// What runs with a notification's payload.
type OnNotify = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

struct WatchCtx {
    object: Arc<Object>,
    on_notify: OnNotify,
    on_error: Box<dyn Fn(i32) + Send + Sync>,
}

extern "C" fn on_watch_notify(
    arg: *mut c_void,
    notify_id: u64,
    cookie: u64,
    _notifier: u64,
    data: *mut c_void,
    len: usize,
) {
    // SAFETY: `arg` is the WatchCtx of a live watch: it is freed only after
    // the watch was removed and its callbacks flushed.
    let ctx = unsafe { &*(arg as *const WatchCtx) };
    let payload = if data.is_null() || len == 0 {
        &[][..]
    } else {
        // SAFETY: librados passes `len` readable bytes for this call.
        unsafe { std::slice::from_raw_parts(data as *const u8, len) }
    };
    if !(ctx.on_notify)(payload) {
        return;
    }
    let o = &ctx.object;
    if let Ok(ack) = &o.lib().rados_notify_ack {
        // SAFETY: live context (the ctx holds the object); the ids are those
        // librados passed.
        unsafe {
            ack(
                o.pool.raw,
                o.oid.as_ptr(),
                notify_id,
                cookie,
                std::ptr::null(),
                0,
            )
        };
    }
}

extern "C" fn on_watch_error(arg: *mut c_void, _cookie: u64, err: i32) {
    // SAFETY: as in on_watch_notify.
    let ctx = unsafe { &*(arg as *const WatchCtx) };
    (ctx.on_error)(err);
}

/// A registered watch; dropping it removes the watch and waits for its
/// callbacks in flight. Not to be dropped from inside one of its callbacks.
pub struct Watch {
    ctx: *mut WatchCtx,
    cookie: u64,
}

// SAFETY: the context is only read (its closures are Send + Sync), and
// librados' watch calls may come from any thread.
unsafe impl Send for Watch {}
// SAFETY: as above.
unsafe impl Sync for Watch {}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watch({}, {})", self.object().spec(), self.cookie)
    }
}

impl Watch {
    fn object(&self) -> &Arc<Object> {
        // SAFETY: `ctx` lives as long as this watch.
        unsafe { &(*self.ctx).object }
    }

    /// How long ago the OSD last confirmed the watch; an error when the
    /// watch broke (then drop it and watch again).
    pub fn check(&self) -> Result<Duration, Error> {
        let o = self.object();
        let Ok(f) = &o.lib().rados_watch_check else {
            return Err(o.missing("check the watch of"));
        };
        // SAFETY: live context; a cookie librados gave.
        let r = unsafe { f(o.pool.raw, self.cookie) };
        check(r, "check the watch of", || o.spec())?;
        Ok(Duration::from_millis(r as u64))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let o = self.object().clone();
        let lib = o.lib();
        // SAFETY: live context and cookie; after the flush no callback of
        // this watch runs or will run, so `ctx` can be freed.
        unsafe {
            if let Ok(unwatch) = &lib.rados_unwatch2 {
                unwatch(o.pool.raw, self.cookie);
            }
            if let Ok(flush) = &lib.rados_watch_flush {
                flush(o.pool.cluster.raw);
            }
            drop(Box::from_raw(self.ctx));
        }
    }
}
