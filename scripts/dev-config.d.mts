export const DEV_CONFIG: string;
export function writeDevConfig(): string;
