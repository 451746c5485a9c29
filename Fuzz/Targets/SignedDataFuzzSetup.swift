import AppStoreSignedData
import SubscriptionDomain
import SubstatusJSON

/// The fixed test certificate authority of the `signed` and `notificationv2` fuzz targets: a root,
/// an intermediate with Apple's WWDR marker and a leaf with the receipt-signing marker (P-256, valid
/// 2020-01-01 to 2049-12-31), made once with pyca/cryptography. Fixed rather than generated per run
/// so that the signed seeds of `Fuzz/Corpus/` (signed with this leaf by `scripts/fuzz-seeds`) verify
/// in every run. A throwaway test key: it signs nothing but fuzz inputs and is trusted nowhere else.
public enum SignedDataFuzzSetup {
  /// The bundle id of the fuzzed app (seeds name it).
  public static let bundleId = "com.example.fuzz"
  /// The Apple app id of the fuzzed app (Production notifications must carry it).
  public static let appAppleId: Int64 = 1_234_567_890
  /// The root certificate, PEM.
  public static let rootPEM = """
    -----BEGIN CERTIFICATE-----
    MIIBpTCCAUugAwIBAgIBATAKBggqhkjOPQQDAjA6MR8wHQYDVQQDDBZTdWJzdGF0
    dXMgRnV6eiBSb290IENBMRcwFQYDVQQKDA5TdWJzdGF0dXMgRnV6ejAeFw0yMDAx
    MDEwMDAwMDBaFw00OTEyMzEyMzU5NTlaMDoxHzAdBgNVBAMMFlN1YnN0YXR1cyBG
    dXp6IFJvb3QgQ0ExFzAVBgNVBAoMDlN1YnN0YXR1cyBGdXp6MFkwEwYHKoZIzj0C
    AQYIKoZIzj0DAQcDQgAE2qd4LkTjogZFeInDf3iX73jOgHC4q7m/vPX9BU2f3pgv
    jA6KOa/ts36M+mVUZT+XXVHJkwhqoFJp2tjNfP5kUaNCMEAwDwYDVR0TAQH/BAUw
    AwEB/zAOBgNVHQ8BAf8EBAMCAQYwHQYDVR0OBBYEFORsHDc4ZQqgeiGUXTgQ7O2N
    XlAVMAoGCCqGSM49BAMCA0gAMEUCIQDY11TSi+DwUSJUHW8axQSExIYiuLOs2Hgo
    Pem2Wr79zgIgWLsi/j792do0Piz+WXadncBtFglZqfr8981iymsqvNQ=
    -----END CERTIFICATE-----
    """
  /// The intermediate certificate, PEM.
  public static let intermediatePEM = """
    -----BEGIN CERTIFICATE-----
    MIIB2zCCAYGgAwIBAgIBAjAKBggqhkjOPQQDAjA6MR8wHQYDVQQDDBZTdWJzdGF0
    dXMgRnV6eiBSb290IENBMRcwFQYDVQQKDA5TdWJzdGF0dXMgRnV6ejAeFw0yMDAx
    MDEwMDAwMDBaFw00OTEyMzEyMzU5NTlaMDoxHzAdBgNVBAMMFlN1YnN0YXR1cyBG
    dXp6IFdXRFIgQ0ExFzAVBgNVBAoMDlN1YnN0YXR1cyBGdXp6MFkwEwYHKoZIzj0C
    AQYIKoZIzj0DAQcDQgAESsrigFNZohZY7T3lRyNt5ossFd7kOs6ZJnBqssYgAU4W
    3n7T2WGBJ+TGhbNHAYHzR1SPO6wEbX1UJ8DoAnQD56N4MHYwEgYDVR0TAQH/BAgw
    BgEB/wIBADAOBgNVHQ8BAf8EBAMCAQYwHQYDVR0OBBYEFEMunxnUlLGEDF2blI8c
    +fuC2gddMB8GA1UdIwQYMBaAFORsHDc4ZQqgeiGUXTgQ7O2NXlAVMBAGCiqGSIb3
    Y2QGAgEEAgUAMAoGCCqGSM49BAMCA0gAMEUCIFPucIQCIeX9Qpb3fiJXf2utzN/k
    Q/LwBAW9Sn5brjGXAiEAzjyOu5K4H6b8YZmPQpr4HMFl+bnM1zKmffA+gYRqmUc=
    -----END CERTIFICATE-----
    """
  /// The leaf certificate, PEM.
  public static let leafPEM = """
    -----BEGIN CERTIFICATE-----
    MIIB3zCCAYWgAwIBAgIBAzAKBggqhkjOPQQDAjA6MR8wHQYDVQQDDBZTdWJzdGF0
    dXMgRnV6eiBXV0RSIENBMRcwFQYDVQQKDA5TdWJzdGF0dXMgRnV6ejAeFw0yMDAx
    MDEwMDAwMDBaFw00OTEyMzEyMzU5NTlaMEQxKTAnBgNVBAMMIFN1YnN0YXR1cyBG
    dXp6IEFwcCBTdG9yZSBTaWduaW5nMRcwFQYDVQQKDA5TdWJzdGF0dXMgRnV6ejBZ
    MBMGByqGSM49AgEGCCqGSM49AwEHA0IABAa8DkcgCtfqu/+55v52QMJech+vQTuE
    iKwyspHmkPJzYgZcFr2Rp3pA4HxPgNIrN78dRldzLUtJujVQT+2YPn+jcjBwMAwG
    A1UdEwEB/wQCMAAwDgYDVR0PAQH/BAQDAgeAMB0GA1UdDgQWBBS1NZ6mzjeRwud2
    krLUUrgaN64mbTAfBgNVHSMEGDAWgBRDLp8Z1JSxhAxdm5SPHPn7gtoHXTAQBgoq
    hkiG92NkBgsBBAIFADAKBggqhkjOPQQDAgNIADBFAiB7IB2lbsJ0JtpGxj/bwOEU
    /wKhit+4VoIhCLyx5xR2qQIhANqlD/BTmwWeZM5rELAU0IdZE29E5V0+WHD1B0C2
    xVbt
    -----END CERTIFICATE-----
    """
  /// The leaf's private key, PKCS#8 PEM (test-only).
  public static let leafKeyPEM = """
    -----BEGIN PRIVATE KEY-----
    MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgfV7jELc2A+O49cxW
    Yph4KgvmGvBvjEYMsjDafH4DkIKhRANCAAQGvA5HIArX6rv/ueb+dkDCXnIfr0E7
    hIisMrKR5pDyc2IGXBa9kad6QOB8T4DSKze/HUZXcy1LSbo1UE/tmD5/
    -----END PRIVATE KEY-----
    """

  /// The root's private key, PKCS#8 PEM (test-only): `scripts/fuzz-seeds` issues broken chains
  /// (no marker, expired, not a CA) under this root with it.
  public static let rootKeyPEM = """
    -----BEGIN PRIVATE KEY-----
    MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgDyYjaT3+xRWRMFpx
    xZwyy6riZ5BiR3ZTeZVfAAPwIe+hRANCAATap3guROOiBkV4icN/eJfveM6AcLir
    ub+89f0FTZ/emC+MDoo5r+2zfoz6ZVRlP5ddUcmTCGqgUmna2M18/mRR
    -----END PRIVATE KEY-----
    """
  /// The intermediate's private key, PKCS#8 PEM (test-only), for `scripts/fuzz-seeds` likewise.
  public static let intermediateKeyPEM = """
    -----BEGIN PRIVATE KEY-----
    MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQglOXP7CAdOWjiJsrv
    Pv98rbMu4Sq5+HRfdBTYMD6n5cahRANCAARKyuKAU1miFljtPeVHI23miywV3uQ6
    zpkmcGqyxiABThbeftPZYYEn5MaFs0cBgfNHVI87rARtfVQnwOgCdAPn
    -----END PRIVATE KEY-----
    """

  /// The signing identity (leaf key, leaf → intermediate → root), parsed once.
  public static let identity: SigningIdentity = {
    do {
      return SigningIdentity(
        key: try ES256PrivateKey(pkcs8PEM: leafKeyPEM),
        chain: [
          try X509Certificate(pem: leafPEM), try X509Certificate(pem: intermediatePEM),
          try X509Certificate(pem: rootPEM),
        ])
    } catch {
      fatalError("fuzz setup: the fixed test identity does not load: \(error)")
    }
  }()

  /// The trusted root.
  public static var root: X509Certificate { identity.chain[2] }
}
