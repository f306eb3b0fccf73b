//! A small safe wrapper over librados and librbd: a [`Cluster`] connection, a
//! [`Pool`] (I/O context) that holds its cluster, and an RBD [`Image`] that
//! holds its pool, so that dropping them in any order is right. Image I/O is
//! asynchronous: each call takes a [`Done`] callback that librbd runs on one
//! of its own threads with the operation's result. An [`Object`] is a small
//! RADOS object read and replaced whole, watched and notified.
//!
//! The libraries are loaded at run time ([`library`]), on first use: a
//! program linked with this crate starts, and serves everything else, on a
//! machine without Ceph's libraries.

mod object;

pub use object::{Object, Watch, WriteError};

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::sync::{Arc, OnceLock};

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    clippy::all
)]
mod ffi {
    #[cfg(feature = "regen-bindings")]
    include!(concat!(env!("OUT_DIR"), "/ffi.rs"));
    #[cfg(not(feature = "regen-bindings"))]
    include!("ffi.rs");
}

/// The library loaded: librbd, which brings librados as its dependency.
pub const LIBRARY: &str = "librbd.so.1";

/// The errno librbd returns when an output array is too small.
const ERANGE: i32 = 34;

/// Errors of the Ceph libraries, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// librbd could not be loaded, or lacks a function this crate calls.
    #[error("{0}")]
    Library(String),
    /// A call failed with an errno.
    #[error("{what} {target}: {source}")]
    Call {
        /// What was attempted ("connect to the cluster", "open image", ...).
        what: &'static str,
        /// What it was attempted on.
        target: String,
        /// The error librados/librbd returned.
        source: std::io::Error,
    },
    /// A name holds a NUL byte.
    #[error("{0:?} holds a NUL byte")]
    Name(String),
}

impl From<Error> for std::io::Error {
    /// The errno of a failed call, or the error's text.
    fn from(e: Error) -> std::io::Error {
        match e.errno() {
            Some(n) => std::io::Error::from_raw_os_error(n),
            None => std::io::Error::other(e.to_string()),
        }
    }
}

impl Error {
    /// The errno of a failed call (ENOENT for a missing pool or image, ...).
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Call { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

fn check(r: i32, what: &'static str, target: impl FnOnce() -> String) -> Result<(), Error> {
    if r < 0 {
        Err(Error::Call {
            what,
            target: target(),
            source: std::io::Error::from_raw_os_error(-r),
        })
    } else {
        Ok(())
    }
}

fn cstring(s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| Error::Name(s.into()))
}

/// Loads librbd once and returns its function table.
pub fn library() -> Result<&'static ffi::LibRbd, Error> {
    static LIB: OnceLock<Result<ffi::LibRbd, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        // SAFETY: loading librbd runs its (and librados') initialisers, which
        // have no preconditions on the loading program.
        let lib = unsafe { ffi::LibRbd::new(LIBRARY) }.map_err(|e| {
            format!(
                "RBD namespaces need Ceph's librbd ({LIBRARY}; Debian: apt install librbd1): {e}"
            )
        })?;
        macro_rules! require {
            ($($f:ident),*) => {$(
                if lib.$f.is_err() {
                    return Err(format!(
                        "{LIBRARY} lacks {}: Ceph 15 (Octopus) or newer is needed",
                        stringify!($f)
                    ));
                }
            )*};
        }
        require!(
            rados_create2,
            rados_conf_read_file,
            rados_conf_parse_env,
            rados_conf_set,
            rados_conf_get,
            rados_connect,
            rados_shutdown,
            rados_cluster_fsid,
            rados_ioctx_create,
            rados_ioctx_destroy,
            rbd_open,
            rbd_close,
            rbd_get_size,
            rbd_get_stripe_unit,
            rbd_get_id,
            rbd_flush,
            rbd_config_image_list,
            rbd_config_image_list_cleanup,
            rbd_aio_create_completion,
            rbd_aio_get_return_value,
            rbd_aio_release,
            rbd_aio_read,
            rbd_aio_write,
            rbd_aio_flush,
            rbd_aio_discard,
            rbd_aio_write_zeroes
        );
        Ok(lib)
    })
    .as_ref()
    .map_err(|e| Error::Library(e.clone()))
}

/// A connection to a Ceph cluster (librados `rados_t`).
pub struct Cluster {
    raw: ffi::rados_t,
    lib: &'static ffi::LibRbd,
    name: String,
}

// SAFETY: librados cluster handles are thread-safe; this wrapper hands out no
// interior references.
unsafe impl Send for Cluster {}
// SAFETY: as above.
unsafe impl Sync for Cluster {}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("name", &self.name).finish()
    }
}

impl Cluster {
    /// Connects as `client` (`admin` for `client.admin`), reading `conf`
    /// (the default search path, `/etc/ceph/ceph.conf` and others, when
    /// `None`), then `options`, then the `CEPH_ARGS` environment variable
    /// (`--option=value ...`, as every Ceph client takes it). Blocks until
    /// the monitors answer or `client_mount_timeout` passes.
    pub fn connect(
        conf: Option<&Path>,
        client: &str,
        options: &[(&str, &str)],
    ) -> Result<Arc<Cluster>, Error> {
        let lib = library()?;
        let name = format!("client.{client}");
        let desc = || {
            format!(
                "(conf {}, {name})",
                conf.map_or("default".into(), |p| p.display().to_string())
            )
        };
        let cname = cstring(&name)?;
        let mut raw: ffi::rados_t = std::ptr::null_mut();
        // SAFETY: valid out pointer and NUL-terminated names.
        let r = unsafe { lib.rados_create2(&mut raw, c"ceph".as_ptr(), cname.as_ptr(), 0) };
        check(r, "create a cluster handle", desc)?;
        // From here `cluster` owns `raw` and shuts it down on every path.
        LIVE.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let cluster = Cluster {
            raw,
            lib,
            name: name.clone(),
        };
        let path = match conf {
            Some(p) => Some(cstring(&p.display().to_string())?),
            None => None,
        };
        // SAFETY: the handle is live; the path is NUL-terminated or null
        // (the default search path).
        let r = unsafe {
            lib.rados_conf_read_file(
                cluster.raw,
                path.as_ref().map_or(std::ptr::null(), |p| p.as_ptr()),
            )
        };
        check(r, "read the Ceph configuration", desc)?;
        for (k, v) in options {
            cluster.set(k, v)?;
        }
        // SAFETY: live handle; a null name means CEPH_ARGS.
        let r = unsafe { lib.rados_conf_parse_env(cluster.raw, std::ptr::null()) };
        check(r, "parse CEPH_ARGS for", desc)?;
        // SAFETY: the handle is live and configured.
        let r = unsafe { lib.rados_connect(cluster.raw) };
        check(r, "connect to the Ceph cluster", desc)?;
        Ok(Arc::new(cluster))
    }

    /// Sets a configuration option (before or after connecting).
    pub fn set(&self, key: &str, value: &str) -> Result<(), Error> {
        let (k, v) = (cstring(key)?, cstring(value)?);
        // SAFETY: live handle, NUL-terminated strings.
        let r = unsafe { self.lib.rados_conf_set(self.raw, k.as_ptr(), v.as_ptr()) };
        check(r, "set option", || format!("{key} = {value}"))
    }

    /// Reads a configuration option.
    pub fn get(&self, key: &str) -> Result<String, Error> {
        let k = cstring(key)?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: live handle; the buffer is writable for its length.
        let r = unsafe {
            self.lib.rados_conf_get(
                self.raw,
                k.as_ptr(),
                buf.as_mut_ptr() as *mut c_char,
                buf.len(),
            )
        };
        check(r, "read option", || key.into())?;
        Ok(c_str(&buf))
    }

    /// The cluster's fsid. librados reads it from the monitors' map, which
    /// may reach a connection shortly after `rados_connect` returned (under
    /// load, or while the monitors are slow to answer): until then it says
    /// all zeros. This waits for the real one, at most [`FSID_TIMEOUT`].
    pub fn fsid(&self) -> Result<String, Error> {
        let start = std::time::Instant::now();
        loop {
            let mut buf = [0u8; 64];
            // SAFETY: live, connected handle; the buffer is writable for its length.
            let r = unsafe {
                self.lib
                    .rados_cluster_fsid(self.raw, buf.as_mut_ptr() as *mut c_char, buf.len())
            };
            check(r, "read the fsid of", || self.name.clone())?;
            let fsid = c_str(&buf);
            if fsid.chars().any(|c| c.is_ascii_hexdigit() && c != '0') {
                return Ok(fsid);
            }
            if start.elapsed() >= FSID_TIMEOUT {
                return Err(Error::Call {
                    what: "read the fsid of",
                    target: self.name.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("the monitors' map has not arrived ({fsid:?})"),
                    ),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The address the OSDs see this connection by (`ip:port/nonce`): what
    /// [`Cluster::blocklist`] takes to fence it. Unique per connection.
    pub fn addrs(&self) -> Result<String, Error> {
        let f = self
            .lib
            .rados_getaddrs
            .as_ref()
            .map_err(|_| Error::Library(format!("{LIBRARY} lacks rados_getaddrs")))?;
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: live, connected handle; valid out pointer.
        let r = unsafe { f(self.raw, &mut out) };
        check(r, "read the address of", || self.name.clone())?;
        // SAFETY: librados returned a NUL-terminated string allocated with
        // malloc, ours to free.
        let s = unsafe { CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above, freed once.
        unsafe { nix::libc::free(out as *mut c_void) };
        Ok(s)
    }

    /// Adds `addr` (`ip:port/nonce`, from [`Cluster::addrs`]) to the OSD
    /// blocklist for `expire_s` seconds (0: the monitors' default, an
    /// hour), and waits until this connection has the OSD map that holds
    /// it: from then on no OSD that serves one of this connection's
    /// operations executes one of that client's. Blocks.
    pub fn blocklist(&self, addr: &str, expire_s: u32) -> Result<(), Error> {
        let f = self.lib.rados_blocklist_add.as_ref().map_err(|_| {
            Error::Library(format!(
                "{LIBRARY} lacks rados_blocklist_add: fencing needs Ceph 16 (Pacific) or newer"
            ))
        })?;
        let c = cstring(addr)?;
        // SAFETY: live, connected handle; librados only reads the address
        // (its prototype takes a mutable pointer).
        let r = unsafe { f(self.raw, c.as_ptr() as *mut c_char, expire_s) };
        check(r, "blocklist", || addr.into())
    }

    /// Runs a monitor command (`{"prefix": ...}` JSON) and returns its
    /// output and status text. Blocks (at most `rados_mon_op_timeout`).
    pub fn mon_command(&self, cmd: &str) -> Result<(String, String), Error> {
        let lib = self.lib;
        let (Ok(f), Ok(free)) = (&lib.rados_mon_command, &lib.rados_buffer_free) else {
            return Err(Error::Library(format!("{LIBRARY} lacks rados_mon_command")));
        };
        let c = cstring(cmd)?;
        let cmds = [c.as_ptr()];
        let (mut out, mut outlen, mut st, mut stlen) =
            (std::ptr::null_mut(), 0usize, std::ptr::null_mut(), 0usize);
        // SAFETY: live, connected handle; one NUL-terminated command; no
        // input; valid out pointers, whose buffers are freed below.
        let r = unsafe {
            f(
                self.raw,
                cmds.as_ptr() as *mut *const c_char,
                1,
                std::ptr::null(),
                0,
                &mut out,
                &mut outlen,
                &mut st,
                &mut stlen,
            )
        };
        let take = |p: *mut c_char, n: usize| {
            if p.is_null() {
                return String::new();
            }
            // SAFETY: librados returned `n` bytes at `p`, ours to free once.
            let s =
                String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(p as *const u8, n) })
                    .into_owned();
            // SAFETY: as above.
            unsafe { free(p) };
            s
        };
        let (out, st) = (take(out, outlen), take(st, stlen));
        check(r, "run the monitor command", || format!("{cmd} ({st})"))?;
        Ok((out, st))
    }

    /// Whether the OSD blocklist holds `addr` (as [`Cluster::addrs`] gives
    /// it): the monitors say, whatever this connection's OSD map. Blocks.
    pub fn is_blocklisted(&self, addr: &str) -> Result<bool, Error> {
        let (out, _) = self.mon_command(r#"{"prefix": "osd blocklist ls", "format": "json"}"#)?;
        Ok(out.contains(&format!("\"{addr}\"")))
    }

    /// Waits until this connection has the newest OSD map. Blocks.
    pub fn wait_for_latest_osdmap(&self) -> Result<(), Error> {
        let f = self
            .lib
            .rados_wait_for_latest_osdmap
            .as_ref()
            .map_err(|_| Error::Library(format!("{LIBRARY} lacks rados_wait_for_latest_osdmap")))?;
        // SAFETY: live, connected handle.
        let r = unsafe { f(self.raw) };
        check(r, "wait for the latest OSD map of", || self.name.clone())
    }

    /// Opens an I/O context on pool `name`.
    pub fn pool(self: &Arc<Self>, name: &str) -> Result<Arc<Pool>, Error> {
        let c = cstring(name)?;
        let mut raw: ffi::rados_ioctx_t = std::ptr::null_mut();
        // SAFETY: live, connected handle; valid out pointer.
        let r = unsafe { self.lib.rados_ioctx_create(self.raw, c.as_ptr(), &mut raw) };
        check(r, "open pool", || name.into())?;
        Ok(Arc::new(Pool {
            raw,
            cluster: self.clone(),
            name: name.into(),
        }))
    }
}

fn c_str(buf: &[u8]) -> String {
    CStr::from_bytes_until_nul(buf)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: the handle is live and nothing uses it any more: every pool
        // holds an Arc of this cluster.
        unsafe { self.lib.rados_shutdown(self.raw) };
        LIVE.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// How long [`Cluster::fsid`] waits for the monitors' map.
pub const FSID_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Cluster handles created and not yet shut down.
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many cluster connections are open (created and not yet shut down),
/// on any thread. A process must not run its exit handlers while one is:
/// librados's threads would run on while the library's static objects are
/// destroyed under them.
pub fn open_connections() -> usize {
    LIVE.load(std::sync::atomic::Ordering::Acquire)
}

/// An I/O context on one pool; it keeps its cluster connected.
pub struct Pool {
    raw: ffi::rados_ioctx_t,
    cluster: Arc<Cluster>,
    name: String,
}

// SAFETY: the context is used to open images, which librbd does with a copy
// of it, and for object operations, which librados allows from several
// threads (an Object serialises its own, for the version they report).
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.name).finish()
    }
}

impl Pool {
    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cluster it belongs to.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Opens RBD image `name` (its head, read-write).
    pub fn image(self: &Arc<Self>, name: &str) -> Result<Image, Error> {
        let c = cstring(name)?;
        let mut raw: ffi::rbd_image_t = std::ptr::null_mut();
        // SAFETY: live I/O context; valid out pointer; no snapshot name.
        let r = unsafe {
            self.cluster
                .lib
                .rbd_open(self.raw, c.as_ptr(), &mut raw, std::ptr::null())
        };
        check(r, "open image", || format!("{}/{name}", self.name))?;
        Ok(Image {
            raw,
            lib: self.cluster.lib,
            pool: self.clone(),
            name: name.into(),
        })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: live context, and no image uses it: each holds an Arc of it.
        unsafe { self.cluster.lib.rados_ioctx_destroy(self.raw) }
    }
}

/// What runs when an asynchronous operation completes: its result (bytes
/// read for a read, 0 or more otherwise, or a negative errno), on a librbd
/// thread.
pub type Done = Box<dyn FnOnce(isize) + Send>;

/// An asynchronous call librbd refused: its completion, not run.
pub struct Refused {
    /// The negative errno.
    pub errno: i32,
    /// The completion the call was given.
    pub done: Done,
}

impl Refused {
    /// Runs the completion with the error, as librbd would have.
    pub fn complete(self) {
        (self.done)(self.errno as isize)
    }
}

impl std::fmt::Debug for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refused")
            .field("errno", &self.errno)
            .finish()
    }
}

/// An open RBD image; it keeps its pool open.
pub struct Image {
    raw: ffi::rbd_image_t,
    lib: &'static ffi::LibRbd,
    pool: Arc<Pool>,
    name: String,
}

// SAFETY: librbd image handles are thread-safe: its I/O calls may come from
// several threads at once (librbd locks its image context).
unsafe impl Send for Image {}
// SAFETY: as above.
unsafe impl Sync for Image {}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("pool", &self.pool.name)
            .field("name", &self.name)
            .finish()
    }
}

extern "C" fn on_complete(c: ffi::rbd_completion_t, arg: *mut c_void) {
    let Ok(lib) = library() else { return };
    // SAFETY: `c` is the completion librbd calls back for, released only here;
    // `arg` is the Box<Done> leaked when the operation was submitted, and this
    // callback runs once per completion.
    let (r, done) = unsafe {
        let r = lib.rbd_aio_get_return_value(c);
        lib.rbd_aio_release(c);
        (r, Box::from_raw(arg as *mut Done))
    };
    done(r);
}

impl Image {
    /// `pool/image`.
    pub fn spec(&self) -> String {
        format!("{}/{}", self.pool.name, self.name)
    }

    /// The pool it is in.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The size in bytes.
    pub fn size(&self) -> Result<u64, Error> {
        let mut size = 0u64;
        // SAFETY: live image; valid out pointer.
        let r = unsafe { self.lib.rbd_get_size(self.raw, &mut size) };
        check(r, "read the size of", || self.spec())?;
        Ok(size)
    }

    /// The stripe unit in bytes: each unit of the image lies in one object
    /// (the object size, unless the image has fancy striping).
    pub fn stripe_unit(&self) -> Result<u64, Error> {
        let mut unit = 0u64;
        // SAFETY: live image; valid out pointer.
        let r = unsafe { self.lib.rbd_get_stripe_unit(self.raw, &mut unit) };
        check(r, "read the stripe unit of", || self.spec())?;
        Ok(unit)
    }

    /// The image's id (stable across renames).
    pub fn id(&self) -> Result<String, Error> {
        let mut buf = [0u8; 128];
        // SAFETY: live image; the buffer is writable for its length.
        let r = unsafe {
            self.lib
                .rbd_get_id(self.raw, buf.as_mut_ptr() as *mut c_char, buf.len())
        };
        check(r, "read the id of", || self.spec())?;
        Ok(c_str(&buf))
    }

    /// The value of an RBD option as it applies to this image: the client's
    /// configuration, or the pool's or the image's override of it (`rbd
    /// config pool|image set`). `None` if librbd has no such option.
    pub fn config(&self, name: &str) -> Result<Option<String>, Error> {
        let mut max: std::ffi::c_int = 0;
        let mut opts: Vec<ffi::rbd_config_option_t> = Vec::new();
        loop {
            // SAFETY: an all-zero option (null strings, source 0) is valid.
            opts.resize_with(max.max(0) as usize, || unsafe { std::mem::zeroed() });
            let mut n = max;
            // SAFETY: live image; `opts` has room for `n` options.
            let r = unsafe {
                self.lib
                    .rbd_config_image_list(self.raw, opts.as_mut_ptr(), &mut n)
            };
            if r == -(ERANGE) && n > max {
                max = n;
                continue;
            }
            check(r, "list the configuration of", || self.spec())?;
            let found = opts[..n as usize].iter().find_map(|o| {
                // SAFETY: librbd filled the option with NUL-terminated strings.
                let key = unsafe { CStr::from_ptr(o.name) };
                (key.to_bytes() == name.as_bytes()).then(|| {
                    unsafe { CStr::from_ptr(o.value) }
                        .to_string_lossy()
                        .into_owned()
                })
            });
            // SAFETY: the `n` options librbd filled, freed once.
            unsafe { self.lib.rbd_config_image_list_cleanup(opts.as_mut_ptr(), n) };
            return Ok(found);
        }
    }

    /// Flushes, blocking until written data is durable.
    pub fn flush(&self) -> Result<(), Error> {
        // SAFETY: live image.
        let r = unsafe { self.lib.rbd_flush(self.raw) };
        check(r, "flush", || self.spec())
    }

    /// Reads `buf.len()` bytes at `off`, blocking; returns the bytes read.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<usize, i32> {
        let f = self.lib.rbd_read.as_ref().map_err(|_| -38)?;
        // SAFETY: live image; `buf` is valid for writes of its length for
        // the duration of the (blocking) call.
        let r = unsafe { f(self.raw, off, buf.len(), buf.as_mut_ptr() as *mut c_char) };
        usize::try_from(r).map_err(|_| r as i32)
    }

    /// Compares `cmp` with the image at `off` and, when equal, writes `data`
    /// there, atomically in the cluster (for every client of the image),
    /// blocking. A mismatch is `Err(-EILSEQ)`.
    pub fn compare_and_write(&self, off: u64, cmp: &[u8], data: &[u8]) -> Result<(), i32> {
        if cmp.len() != data.len() {
            return Err(-22);
        }
        let f = self.lib.rbd_compare_and_write.as_ref().map_err(|_| -38)?;
        let mut mismatch = 0u64;
        // SAFETY: live image; both buffers are valid for reads of their
        // (equal) length for the duration of the blocking call.
        let r = unsafe {
            f(
                self.raw,
                off,
                data.len(),
                cmp.as_ptr() as *const c_char,
                data.as_ptr() as *const c_char,
                &mut mismatch,
                0,
            )
        };
        if r < 0 {
            Err(r as i32)
        } else {
            Ok(())
        }
    }

    /// Creates a completion that runs `done`, and submits it with `start`.
    /// If the submission fails, `done` comes back, not run, with the
    /// negative errno.
    fn submit(
        &self,
        done: Done,
        start: impl FnOnce(ffi::rbd_completion_t) -> i32,
    ) -> Result<(), Refused> {
        let arg = Box::into_raw(Box::new(done)) as *mut c_void;
        let mut c: ffi::rbd_completion_t = std::ptr::null_mut();
        // SAFETY: valid out pointer; `on_complete` takes `arg` back.
        let r = unsafe {
            self.lib
                .rbd_aio_create_completion(arg, Some(on_complete), &mut c)
        };
        if r < 0 {
            // SAFETY: no completion exists that could run with `arg`.
            let done = *unsafe { Box::from_raw(arg as *mut Done) };
            return Err(Refused { errno: r, done });
        }
        let r = start(c);
        if r < 0 {
            // SAFETY: the submission failed, so librbd never calls back for `c`.
            let done = *unsafe {
                self.lib.rbd_aio_release(c);
                Box::from_raw(arg as *mut Done)
            };
            return Err(Refused { errno: r, done });
        }
        Ok(())
    }

    /// Reads `len` bytes at `off` into `buf`.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes, and neither read nor
    /// written by anyone else, until `done` runs.
    pub unsafe fn aio_read(
        &self,
        off: u64,
        buf: *mut u8,
        len: usize,
        done: Done,
    ) -> Result<(), Refused> {
        // SAFETY: live image; the caller keeps the buffer to librbd until done.
        self.submit(done, |c| unsafe {
            self.lib
                .rbd_aio_read(self.raw, off, len, buf as *mut c_char, c)
        })
    }

    /// Writes `len` bytes from `buf` at `off`.
    ///
    /// # Safety
    /// `buf` must be valid for reads of `len` bytes, and not written, until
    /// `done` runs.
    pub unsafe fn aio_write(
        &self,
        off: u64,
        buf: *const u8,
        len: usize,
        done: Done,
    ) -> Result<(), Refused> {
        // SAFETY: live image; the caller keeps the buffer to librbd until done.
        self.submit(done, |c| unsafe {
            self.lib
                .rbd_aio_write(self.raw, off, len, buf as *const c_char, c)
        })
    }

    /// Makes completed writes durable.
    pub fn aio_flush(&self, done: Done) -> Result<(), Refused> {
        // SAFETY: live image.
        self.submit(done, |c| unsafe { self.lib.rbd_aio_flush(self.raw, c) })
    }

    /// Deallocates `len` bytes at `off` (reads may or may not return zeroes
    /// afterwards, by librbd's discard granularity).
    pub fn aio_discard(&self, off: u64, len: u64, done: Done) -> Result<(), Refused> {
        // SAFETY: live image.
        self.submit(done, |c| unsafe {
            self.lib.rbd_aio_discard(self.raw, off, len, c)
        })
    }

    /// Zeroes `len` bytes at `off` (reads return zeroes afterwards).
    pub fn aio_write_zeroes(&self, off: u64, len: u64, done: Done) -> Result<(), Refused> {
        let Ok(len) = usize::try_from(len) else {
            return Err(Refused { errno: -22, done });
        };
        // SAFETY: live image.
        self.submit(done, |c| unsafe {
            self.lib.rbd_aio_write_zeroes(self.raw, off, len, c, 0, 0)
        })
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: live image; librbd's close waits for its operations in
        // flight, whose callbacks own everything they touch. (Its result only
        // says whether a last flush of librbd's cache failed; the target
        // runs without that cache and flushes before closing.)
        unsafe { self.lib.rbd_close(self.raw) };
    }
}
