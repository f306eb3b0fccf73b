//! RDMA devices: the context librdmacm opens for each, kept open by an
//! anchor while anything made from it lives, its limits and its
//! asynchronous events.

use std::ptr;
use std::sync::Arc;

use rdma_sys::*;

use crate::error::{Error, Result};
use crate::fd::drain_shared;

/// A device context, opened by librdmacm.
///
/// librdmacm closes a removed device's context once nothing references it:
/// no RDMA-CM id bound to it and no device list from `rdma_get_devices` that
/// names it. So that a context outlives no resource made from it (a
/// protection domain, a completion channel), every `Context` holds a list
/// that names its device and no other (`DeviceAnchor`); whatever is made
/// from a context holds the `Context`. When the last of them is gone, the
/// device's reference goes back to librdmacm, and a removed device can be
/// closed ([`sync_devices`]).
#[derive(Clone, Debug)]
pub struct Context {
    raw: *mut ibv_context,
    _anchor: Arc<DeviceAnchor>,
}

// SAFETY: ibv_context is thread safe per libibverbs; the anchor keeps it open.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

/// A device list from `rdma_get_devices`, cut down to one device: while it
/// is held, librdmacm keeps that device's context open (it counts one
/// reference per listed device until `rdma_free_devices`).
#[derive(Debug)]
struct DeviceAnchor(*mut *mut ibv_context);

// SAFETY: the list is not touched after creation until rdma_free_devices,
// which takes librdmacm's lock.
unsafe impl Send for DeviceAnchor {}
// SAFETY: as above.
unsafe impl Sync for DeviceAnchor {}

impl DeviceAnchor {
    /// A reference to the device of `ctx`, if librdmacm lists it now.
    fn take(ctx: *mut ibv_context) -> Option<DeviceAnchor> {
        // SAFETY: no preconditions; the result is NULL or a NULL-terminated
        // array from malloc, with one reference taken per listed device.
        let list = unsafe { rdma_get_devices(ptr::null_mut()) };
        if list.is_null() {
            return None;
        }
        let mut n = 0;
        // SAFETY: the array is NULL-terminated.
        while !unsafe { *list.add(n) }.is_null() {
            n += 1;
        }
        // SAFETY: n entries are readable.
        let all: Vec<*mut ibv_context> = (0..n).map(|i| unsafe { *list.add(i) }).collect();
        let others: Vec<_> = all.iter().copied().filter(|&c| c != ctx).collect();
        // The other devices' references go back at once, through a list of
        // them alone (malloc'd, as rdma_free_devices frees it).
        // SAFETY: room for the others and the terminating NULL.
        let rest = unsafe { libc::malloc((others.len() + 1) * std::mem::size_of::<usize>()) }
            as *mut *mut ibv_context;
        if rest.is_null() {
            // SAFETY: the list as librdmacm made it, freed once.
            unsafe { rdma_free_devices(list) };
            return None;
        }
        for (i, &c) in others
            .iter()
            .chain(std::iter::once(&ptr::null_mut()))
            .enumerate()
        {
            // SAFETY: in bounds of `rest`.
            unsafe { *rest.add(i) = c };
        }
        // SAFETY: `rest` is a NULL-terminated malloc'd list of devices whose
        // references the original list took; freed once.
        unsafe { rdma_free_devices(rest) };
        if others.len() == n {
            // SAFETY: nothing references this device's entry: free the list
            // memory alone (its references went back through `rest`).
            unsafe { libc::free(list as *mut libc::c_void) };
            return None;
        }
        // The original list now names only `ctx` (one reference).
        // SAFETY: n >= 1 entries, so [0] and [1] are in bounds.
        unsafe {
            *list = ctx;
            *list.add(1) = ptr::null_mut();
        }
        Some(DeviceAnchor(list))
    }
}

impl Drop for DeviceAnchor {
    fn drop(&mut self) {
        // SAFETY: the list names one device whose reference it holds; freed once.
        unsafe { rdma_free_devices(self.0) }
    }
}

/// Has librdmacm look at the devices now: a device that was removed and that
/// nothing references any more gets its context closed (the kernel's removal
/// of a device without disassociation waits for that). librdmacm keeps every
/// device it saw open, used or not, so a process using it must do this from
/// time to time for any removal to complete. Returns how many devices there
/// are; with none, librdmacm stops short and closes nothing.
pub fn sync_devices() -> usize {
    let mut n: std::os::raw::c_int = 0;
    // SAFETY: `n` is a valid out pointer; the list is freed at once.
    let list = unsafe { rdma_get_devices(&mut n) };
    if list.is_null() {
        return 0;
    }
    // SAFETY: as returned, freed once.
    unsafe { rdma_free_devices(list) };
    n.max(0) as usize
}

/// Makes librdmacm's device list safe to refresh from any thread: call it
/// first thing in `main`, before any thread starts.
///
/// librdmacm up to rdma-core 50 (Debian 12 ships 44) sorts the devices it
/// lists by address with a comparison that truncates the pointer difference
/// to 32 bits (fixed upstream in "librdmacm: Fix an overflow bug in qsort
/// comparison function"). glibc gives each thread its own malloc arena, far
/// from the main heap, so a device libibverbs finds from a worker thread (an
/// RDMA device added back after a removal) sorts wrongly against those found
/// at start: librdmacm then loses devices from its list and, once it is
/// empty, deadlocks on its own lock in `ucma_init` (the listener never binds
/// again, and a worker that refreshes the list hangs). Whether the truncated
/// sign comes out wrong depends on where the heaps land: in the lab, a run
/// failed 9 of 10 remove/add rounds, another none; with address-space
/// randomization off, round 2 failed every time, and with this, none did.
/// One arena keeps every device libibverbs allocates in the main heap, within
/// 2 GiB of each other. The hot paths allocate little (glibc's per-thread
/// caches serve them): the same-boot benchmark showed no cost beyond noise.
pub fn one_malloc_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a glibc tunable; called before other threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

impl Context {
    /// The context `raw` (an RDMA-CM id's device), anchored. Contexts of one
    /// device share their anchor while any lives. None if librdmacm does not
    /// list the device (it went away).
    pub(crate) fn anchored(raw: *mut ibv_context) -> Option<Context> {
        type Anchors = Vec<(usize, std::sync::Weak<DeviceAnchor>)>;
        static ANCHORS: std::sync::Mutex<Anchors> = std::sync::Mutex::new(Vec::new());
        if raw.is_null() {
            return None;
        }
        let mut anchors = ANCHORS.lock().unwrap_or_else(|p| p.into_inner());
        anchors.retain(|(_, w)| w.strong_count() > 0);
        if let Some(a) = anchors
            .iter()
            .find(|(k, _)| *k == raw as usize)
            .and_then(|(_, w)| w.upgrade())
        {
            return Some(Context { raw, _anchor: a });
        }
        let a = Arc::new(DeviceAnchor::take(raw)?);
        anchors.push((raw as usize, Arc::downgrade(&a)));
        Some(Context { raw, _anchor: a })
    }
}

/// The device limits a queue pair is sized against.
#[derive(Debug, Clone, Copy)]
pub struct DeviceAttr {
    /// Maximum work requests per queue.
    pub max_qp_wr: u32,
    /// Maximum scatter/gather entries per work request.
    pub max_sge: u32,
    /// Maximum completion queue entries.
    pub max_cqe: u32,
    /// Maximum outstanding RDMA READs as responder.
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding RDMA READs as initiator.
    pub max_qp_init_rd_atom: u32,
    /// The device supports memory management extensions (fast registration,
    /// memory windows, SEND_WITH_INVALIDATE).
    pub mem_mgt_extensions: bool,
    /// Maximum memory windows.
    pub max_mw: u32,
    /// Maximum shared receive queues (0: the device has none).
    pub max_srq: u32,
    /// Maximum work requests per shared receive queue.
    pub max_srq_wr: u32,
    /// Maximum scatter/gather entries per shared receive queue work request.
    pub max_srq_sge: u32,
    /// The IEEE vendor ID.
    pub vendor_id: u32,
}

impl Context {
    /// Queries the device limits.
    pub fn query(&self) -> Result<DeviceAttr> {
        // SAFETY: ibv_device_attr is plain data; zero is a valid initial value.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: self.raw is a live context; `a` is a valid out pointer.
        let r = unsafe { ibv_query_device(self.raw, &mut a) };
        if r != 0 {
            return Err(Error::from_ret("ibv_query_device", r));
        }
        Ok(DeviceAttr {
            max_qp_wr: a.max_qp_wr.max(0) as u32,
            max_sge: a.max_sge.max(0) as u32,
            max_cqe: a.max_cqe.max(0) as u32,
            max_qp_rd_atom: a.max_qp_rd_atom.max(0) as u32,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom.max(0) as u32,
            mem_mgt_extensions: a.device_cap_flags
                & ibv_device_cap_flags::IBV_DEVICE_MEM_MGT_EXTENSIONS.0
                != 0,
            max_mw: a.max_mw.max(0) as u32,
            max_srq: a.max_srq.max(0) as u32,
            max_srq_wr: a.max_srq_wr.max(0) as u32,
            max_srq_sge: a.max_srq_sge.max(0) as u32,
            vendor_id: a.vendor_id,
        })
    }

    /// The device's name (`rxe0`, `mlx5_0`, ...).
    pub fn name(&self) -> String {
        // SAFETY: a live context names its device; the name is a C string
        // owned by the device.
        unsafe { std::ffi::CStr::from_ptr(ibv_get_device_name((*self.raw).device)) }
            .to_string_lossy()
            .into_owned()
    }

    /// Whether the device is a software one: soft-RoCE (rxe, vendor ID
    /// 0xFFFFFF, as SPDK tells it) or soft-iWARP (siw, 0x626D74), or any
    /// device that sysfs shows with no bus device under it.
    pub fn is_software(&self) -> bool {
        const SOFTWARE_VENDORS: [u32; 2] = [0xFF_FFFF, 0x62_6D74];
        if self
            .query()
            .is_ok_and(|a| SOFTWARE_VENDORS.contains(&a.vendor_id))
        {
            return true;
        }
        let dir = std::path::Path::new("/sys/class/infiniband").join(self.name());
        dir.exists() && !dir.join("device").exists()
    }

    /// The raw pointer.
    pub fn as_ptr(&self) -> *mut ibv_context {
        self.raw
    }

    /// Takes the device's pending asynchronous events (QP fatal, access errors,
    /// port changes, ...) without waiting, each described as libibverbs names it
    /// plus the QP number where the event concerns a QP. Meant for diagnosing a
    /// queue that failed: whoever calls this first consumes the events.
    pub fn take_async_events(&self) -> Result<Vec<String>> {
        // SAFETY: self.raw is a live context; async_fd is its event descriptor.
        let fd = unsafe { (*self.raw).async_fd };
        // Every queue of every thread on this device shares the descriptor,
        // so another reader may take the event between the poll and the
        // read: drain_shared reads it non-blocking.
        drain_shared(fd, "poll(async events)", || {
            // SAFETY: ibv_async_event is plain data; zero is a valid initial value.
            let mut ev: ibv_async_event = unsafe { std::mem::zeroed() };
            // SAFETY: `ev` is a valid out pointer; on the non-blocking
            // descriptor the call returns at once (-1, EAGAIN) when another
            // reader took the event.
            if unsafe { ibv_get_async_event(self.raw, &mut ev) } != 0 {
                return None;
            }
            // SAFETY: ibv_event_type_str returns a static C string for any value.
            let name = unsafe { std::ffi::CStr::from_ptr(ibv_event_type_str(ev.event_type)) }
                .to_string_lossy()
                .into_owned();
            use ibv_event_type::*;
            let qp_event = matches!(
                ev.event_type,
                IBV_EVENT_QP_FATAL
                    | IBV_EVENT_QP_REQ_ERR
                    | IBV_EVENT_QP_ACCESS_ERR
                    | IBV_EVENT_COMM_EST
                    | IBV_EVENT_SQ_DRAINED
                    | IBV_EVENT_PATH_MIG
                    | IBV_EVENT_PATH_MIG_ERR
                    | IBV_EVENT_QP_LAST_WQE_REACHED
            );
            let text = if qp_event {
                // SAFETY: for QP events the union holds the QP, live until acked.
                let qpn = unsafe { (*ev.element.qp).qp_num };
                format!("{name} (qp {qpn})")
            } else {
                name
            };
            // SAFETY: acking the event obtained above exactly once.
            unsafe { ibv_ack_async_event(&mut ev) };
            Some(text)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context is only ever made for a pointer librdmacm lists (and so
    /// keeps open while the list is held): an unknown one gets no `Context`.
    #[test]
    #[cfg_attr(miri, ignore = "calls librdmacm")]
    fn context_only_for_listed_devices() {
        assert!(Context::anchored(ptr::null_mut()).is_none());
        let mut fake = std::mem::MaybeUninit::<ibv_context>::uninit();
        assert!(Context::anchored(fake.as_mut_ptr()).is_none());
    }
}
