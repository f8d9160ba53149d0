export const DEV_CONFIG: string;
export function writeDevConfig(opts?: {
  file?: string;
  consumers?: Array<{ binding: string; service: string; entrypoint?: string }>;
  vars?: Record<string, string>;
  outsideRoot?: boolean;
  devFlag?: boolean;
}): string;
