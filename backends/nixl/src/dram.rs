//! [`Dram`]: host memory as NIXL registers it.

use nixl_sys::{MemType, MemoryRegion, NixlDescriptor};

/// A range of host memory as NIXL registers it (`MemType::Dram`, device 0): what the backend
/// registers for its region, and what code calling nixl-sys directly beside blockwire (the
/// bench's raw NIXL baseline) can register too.
///
/// ```
/// use nixl_sys::{MemoryRegion, NixlDescriptor, MemType};
/// let mem = vec![0u8; 4096];
/// let d = blockwire_nixl::Dram::new(mem.as_ptr() as usize, mem.len());
/// assert_eq!(d.size(), 4096);
/// assert!(matches!(d.mem_type(), MemType::Dram));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Dram {
    pub(crate) addr: usize,
    len: usize,
}

impl Dram {
    /// The `len` bytes at address `addr`. Describing memory is safe; registering it with NIXL
    /// lets peers reach it, so it must stay allocated while registered.
    pub fn new(addr: usize, len: usize) -> Self {
        Dram { addr, len }
    }
}

impl MemoryRegion for Dram {
    unsafe fn as_ptr(&self) -> *const u8 {
        self.addr as *const u8
    }

    fn size(&self) -> usize {
        self.len
    }
}

impl NixlDescriptor for Dram {
    fn mem_type(&self) -> MemType {
        MemType::Dram
    }

    fn device_id(&self) -> u64 {
        0
    }
}
