/// This release of Haul: the version its programs report and send in `User-Agent`.
public enum HaulRelease {
    /// The version of this build.
    public static let version = "0.1.0"
}
