#if canImport(Glibc)
import Glibc
#endif

/// Functions glibc has but Swift's Glibc module does not declare (`renameat2`, `malloc_trim`),
/// looked up by name in the running process; `nil` when this C library lacks one.
package enum GlibcFunction {
    package static func lookup<Function>(_ name: String, as type: Function.Type) -> Function? {
        #if canImport(Glibc)
        guard let symbol = dlsym(nil, name) else { return nil }
        return unsafeBitCast(symbol, to: type)
        #else
        return nil
        #endif
    }
}
